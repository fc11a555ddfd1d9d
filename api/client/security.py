"""How a client reaches a secure cluster (issue 18): TLS trust, a client certificate, and
HTTP credentials, as Kafka clients' ``security.protocol``/``ssl.*``/``sasl.*`` settings.

``ClientSecurity`` is passed to producers, consumers and the CLI (``--ssl-cafile``,
``--ssl-certfile``, ``--ssl-keyfile``, ``--username``/``--password`` or ``--token``, or the
``LONGBOAT_*`` environment variables of the same names). With ``ssl_cafile`` the client
trusts that CA for ``https://`` brokers (the system's CAs without it); a certificate and key
make it present them (mTLS); a user and password are sent as HTTP Basic, a token as Bearer.
The password and token never appear in ``repr``.
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass, field

from common.tls_reads import batched_reads


@dataclass(frozen=True)
class ClientSecurity:
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.username is not None and self.token is not None:
            raise ValueError("give a username and password or a token, not both")

    @classmethod
    def from_env(cls, **given: str | None) -> ClientSecurity | None:
        """``given`` (None: not given) over ``LONGBOAT_SSL_CAFILE``, ``LONGBOAT_USERNAME``,
        ...; None when nothing is set at all."""
        names = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "username", "password", "token")
        values = {n: given.get(n) or os.environ.get(f"LONGBOAT_{n.upper()}") for n in names}
        if not any(values.values()):
            return None
        return cls(**values)

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.ssl_cafile is None and self.ssl_certfile is None:
            return None
        ctx = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile is not None and self.ssl_keyfile is not None:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return batched_reads(ctx)

    def authorization(self) -> str | None:
        """The ``Authorization`` header value, if any."""
        if self.token is not None:
            return f"Bearer {self.token}"
        if self.username is not None and self.password is not None:
            raw = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(raw).decode()
        return None
