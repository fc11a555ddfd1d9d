"""The files of a secure local cluster (issue 18): a CA, node and admin certificates, configs.

``SecureSetup.create(root, ...)`` makes a CA under ``root/tls`` and one certificate per node
(``CN=node-<id>``) and one for the operator (``CN=admin``). ``node_config`` writes the TOML
of one node:

* a controller listens on ``CONTROLLER`` (SSL, client certificate required);
* a broker on ``CLIENT`` (SASL_SSL: HTTP Basic, a Bearer JWT signed by the setup's own
  issuer key with audience ``longboat``, or a client certificate) and
  ``BROKER`` (SSL, client certificate required, the inter-broker listener);
* certificate subjects map to ``User:<CN>`` (``RULE:^CN=([^,]+),O=Longboat$/$1/``), every
  node and ``admin`` are super users, and the authorizer is on: anybody else needs ACLs;
* a broker given Kafka ports serves Kafka's protocol on them (``KAFKA_PROTOCOLS``): ``KAFKA``
  is SASL_SSL (PLAIN, SCRAM-SHA-256/512, and OAUTHBEARER with the setup's issuer), and the
  tests add ``KAFKA_SASL_PLAINTEXT`` and ``KAFKA_SSL`` (client certificate required).

``longboat dev up --secure`` and the integration tests run clusters from these files.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from pathlib import Path

from api.node.certs import CertificateAuthority, Issued, make_ca, make_signing_key
from common.tls_reads import batched_reads

PRINCIPAL_RULES = "RULE:^CN=([^,]+),O=Longboat$/$1/,DEFAULT"
KAFKA_PROTOCOLS = {
    "KAFKA": "SASL_SSL",
    "KAFKA_SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "KAFKA_SSL": "SSL",
}
"""The Kafka listeners a secure broker can have, by name (``node_config(kafka=...)``)."""


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string is a JSON string


@dataclass
class SecureSetup:
    root: Path
    ca: CertificateAuthority
    admin: Issued
    nodes: dict[int, Issued]
    jwt_issuer: Issued
    """ES256 key pair bearer tokens are signed with (``cert`` is the public key)."""

    @classmethod
    def create(
        cls, root: Path, node_ids: list[int], hosts: dict[int, str] | None = None
    ) -> SecureSetup:
        """``hosts``: a node's listen address where it is not 127.0.0.1 (its certificate
        names it too, so that peers verify it there)."""
        tls = root / "tls"
        ca = make_ca(tls)
        hosts = hosts or {}
        nodes = {
            i: ca.issue(f"node-{i}", tls, hosts=(hosts[i],) if i in hosts else ()) for i in node_ids
        }
        return cls(root, ca, ca.issue("admin", tls), nodes, make_signing_key(tls))

    @property
    def super_users(self) -> str:
        return ";".join(["User:admin", *(f"User:node-{i}" for i in sorted(self.nodes))])

    def _settings(self, name: str, node_id: int, client_auth: str, **extra: object) -> str:
        cert = self.nodes[node_id]
        lines = [
            f"[listener_settings.{name}]",
            f"ssl_certfile = {_toml(cert.cert)}",
            f"ssl_keyfile = {_toml(cert.key)}",
            f"ssl_cafile = {_toml(self.ca.cert)}",
            f"ssl_client_auth = {_toml(client_auth)}",
            f"ssl_principal_mapping_rules = {_toml(PRINCIPAL_RULES)}",
            *(f"{k} = {_toml(v)}" for k, v in extra.items()),
        ]
        return "\n".join(lines) + "\n"

    def node_config(
        self,
        role: str,
        node_id: int,
        port: int,
        quorum: str,
        *,
        broker_port: int | None = None,
        kafka: dict[str, int] | None = None,
        host: str = "127.0.0.1",
    ) -> Path:
        """Write ``root/tls/<role>-<id>.toml``; ``port`` is the controller listener of a
        controller, the client listener of a broker (``broker_port`` its inter-broker one).
        ``kafka``: a broker's Kafka listeners, name (a ``KAFKA_PROTOCOLS`` key) -> port. Every
        listener is on ``host``."""
        common = [
            'controller_listener_names = "CONTROLLER"',
            f"super_users = {_toml(self.super_users)}",
            "authorizer_enable = true",
        ]
        if role == "controller":
            body = [
                f'listeners = "CONTROLLER://{host}:{port}"',
                'listener_security_protocol_map = "CONTROLLER:SSL"',
                *common,
                "",
                self._settings("CONTROLLER", node_id, "required"),
            ]
        else:
            assert broker_port is not None
            kafka = kafka or {}
            protocols = ",".join(f"{n}:{KAFKA_PROTOCOLS[n]}" for n in kafka)
            body = [
                f'listeners = "CLIENT://{host}:{port},BROKER://{host}:{broker_port}"',
                'listener_security_protocol_map = "CLIENT:SASL_SSL,BROKER:SSL,CONTROLLER:SSL'
                + (f',{protocols}"' if protocols else '"'),
                *(
                    [
                        "kafka_listeners = "
                        + _toml(",".join(f"{n}://{host}:{p}" for n, p in kafka.items()))
                    ]
                    if kafka
                    else []
                ),
                'inter_broker_listener_name = "BROKER"',
                *common,
                "",
                self._settings(
                    "CLIENT",
                    node_id,
                    "requested",
                    http_auth_mechanisms=["basic", "bearer"],
                    jwt_public_key_file=self.jwt_issuer.cert,
                    jwt_audience="longboat",
                ),
                self._settings("BROKER", node_id, "required"),
                self._settings("CONTROLLER", node_id, "required"),
                *(self._kafka_settings(n, node_id) for n in kafka),
            ]
        path = self.root / "tls" / f"{role}-{node_id}.toml"
        path.write_text("\n".join(body))
        return path

    def _kafka_settings(self, name: str, node_id: int) -> str:
        proto = KAFKA_PROTOCOLS[name]
        if proto == "SASL_SSL":
            return self._settings(
                name,
                node_id,
                "none",
                sasl_enabled_mechanisms=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"],
                jwt_public_key_file=self.jwt_issuer.cert,
                jwt_audience="longboat",
            )
        if proto == "SSL":
            return self._settings(name, node_id, "required")
        return (
            f"[listener_settings.{name}]\nssl_principal_mapping_rules = {_toml(PRINCIPAL_RULES)}\n"
        )

    def token(self, user: str, *, valid_s: int = 3600, audience: str = "longboat") -> str:
        """A bearer token for ``User:<user>`` signed by this setup's issuer key."""
        import time

        import jwt

        now = int(time.time())
        claims = {"sub": user, "aud": audience, "iat": now, "exp": now + valid_s}
        return jwt.encode(claims, self.jwt_issuer.key.read_text(), algorithm="ES256")

    def add_scram_admin(self, broker_url: str, cluster_id: str) -> Path:
        """Give ``User:admin`` a random SCRAM-SHA-512 password too (the Kafka listener's SASL
        clients log in with one), through ``broker_url``'s users route with the admin
        certificate; the password is written to ``root/tls/admin.password`` (owner only)."""
        import os
        import secrets
        import urllib.request

        password = secrets.token_urlsafe(18)
        body = {"user_name": "admin", "password": password, "mechanism": "SCRAM-SHA-512"}
        req = urllib.request.Request(
            f"{broker_url}/v3/clusters/{cluster_id}/users",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30, context=self.client_ssl()):
            pass
        path = self.root / "tls" / "admin.password"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
        return path

    def client_ssl(self, *, admin: bool = True) -> ssl.SSLContext:
        """Trusts the CA; presents the admin certificate unless ``admin`` is False."""
        ctx = ssl.create_default_context(cafile=str(self.ca.cert))
        if admin:
            ctx.load_cert_chain(self.admin.cert, self.admin.key)
        return batched_reads(ctx)
