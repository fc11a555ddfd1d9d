"""TLS and credentials of the data source at work (issue 18): the Python client's
``ClientSecurity`` built from ``spark.options.SecurityOptions``, and HTTP connections for
executors that present them.

The options travel to executors inside pickled input partitions and writers (Spark sends
them as task bytes, never as text in a plan); an ``ssl.SSLContext`` does not pickle, so
each process builds its own from the files, which must exist at the same paths on every
executor (as Spark's Kafka source needs its truststore there).

401 and 403 answers become ``LongboatAuthError``: not retried (the same credentials fail
on every broker, as Kafka treats authentication and authorization failures) and named with
Kafka's error (``SASL_AUTHENTICATION_FAILED``, ``TOPIC_AUTHORIZATION_FAILED``, ...).
"""

from __future__ import annotations

import http.client
import ssl
import urllib.parse

from api.client import ClientError, ClientSecurity
from spark.options import SecurityOptions

AUTH_ERRORS = frozenset(
    {
        "SASL_AUTHENTICATION_FAILED",
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    }
)


class LongboatAuthError(RuntimeError):
    """The cluster refused the job's credentials (401) or its principal's rights (403)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def client_security(sec: SecurityOptions) -> ClientSecurity | None:
    """What ``api.client`` producers, consumers and metadata calls take; None: plaintext and
    anonymous."""
    if not sec.any:
        return None
    return ClientSecurity(
        ssl_cafile=sec.cafile,
        ssl_certfile=sec.certfile,
        ssl_keyfile=sec.keyfile,
        username=sec.username,
        password=sec.password,
        token=sec.token,
    )


def ssl_context(sec: SecurityOptions) -> ssl.SSLContext | None:
    """For ``https://`` brokers: the truststore's CA (the system's CAs without one) and the
    client certificate if given."""
    if not sec.tls:
        return None
    cs = client_security(sec)
    ctx = None if cs is None else cs.ssl_context()
    return ctx if ctx is not None else ssl.create_default_context()


def auth_headers(sec: SecurityOptions) -> dict[str, str]:
    cs = client_security(sec)
    value = None if cs is None else cs.authorization()
    return {} if value is None else {"Authorization": value}


def connect(url: str, sec: SecurityOptions, timeout_s: float) -> http.client.HTTPConnection:
    u = urllib.parse.urlsplit(url)
    host = u.hostname or "127.0.0.1"
    if u.scheme == "https":
        return http.client.HTTPSConnection(
            host, u.port or 443, timeout=timeout_s, context=ssl_context(sec)
        )
    return http.client.HTTPConnection(host, u.port or 80, timeout=timeout_s)


def auth_error(status: int, message: str, where: str) -> LongboatAuthError:
    """401/403 as Kafka's error, with a hint at the option to look at."""
    if status == 401:
        return LongboatAuthError(
            "SASL_AUTHENTICATION_FAILED",
            f"{where}: {message} (check longboat.auth.username/password, longboat.auth.token "
            "or kafka.sasl.jaas.config)",
        )
    code = "CLUSTER_AUTHORIZATION_FAILED"
    for kind in ("TOPIC", "GROUP", "TRANSACTIONAL_ID"):
        if kind in message:
            code = f"{kind}_AUTHORIZATION_FAILED"
            break
    return LongboatAuthError(code, f"{where}: {message} (the principal lacks an ACL)")


def reraise_auth(e: ClientError) -> None:
    """A client's 401/403 as ``LongboatAuthError``; other errors are left to the caller."""
    if e.code in AUTH_ERRORS:
        hint = (
            " (check longboat.auth.username/password, longboat.auth.token or "
            "kafka.sasl.jaas.config)"
            if e.code == "SASL_AUTHENTICATION_FAILED"
            else " (the principal lacks an ACL)"
        )
        raise LongboatAuthError(e.code, f"{e.message}{hint}") from e
