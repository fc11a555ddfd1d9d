"""``Admin``: ACL and SCRAM user administration through a broker's HTTP API (issue 18).

A small blocking client (``urllib``, no event loop) of the routes of ``api.http.acls``: what
Kafka's ``Admin.createAcls/describeAcls/deleteAcls`` and ``alterUserScramCredentials/
describeUserScramCredentials`` do, in the shapes of ``metalog.security`` (``AclBinding``,
``AclBindingFilter``). The CLI's ``longboat acls`` and ``longboat users`` use it.

Any broker serves it (the first of ``bootstrap`` that answers; it forwards to the active
controller). ``auth=(user, password)`` sends HTTP Basic credentials and ``ssl_context``
verifies a TLS listener, for a cluster that asks for them. A refusal raises ``ClientError``
whose ``code`` is the HTTP error body's ``error_code`` (as a string) and whose message is
the broker's; a password is sent in a request body only, never in a URL.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from api.client.errors import ClientError
from api.client.security import ClientSecurity
from metalog.security import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """What may be known of a credential: its mechanism and iteration count (as Kafka's
    ``DescribeUserScramCredentials``); never its salt or keys."""

    mechanism: str
    iterations: int


def acl_body(acl: AclBinding) -> dict[str, str]:
    return {
        "resource_type": str(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": str(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": str(acl.operation),
        "permission": str(acl.permission),
    }


def acl_of_json(d: dict[str, Any]) -> AclBinding:
    return AclBinding(
        principal=d["principal"],
        host=d["host"],
        resource_type=ResourceType(d["resource_type"]),
        resource_name=d["resource_name"],
        pattern_type=PatternType(d["pattern_type"]),
        operation=Operation(d["operation"]),
        permission=Permission(d["permission"]),
    )


def filter_query(flt: AclBindingFilter, *, explicit_any: bool) -> dict[str, str]:
    """The query parameters of a filter. ``explicit_any``: name ANY for every enum field
    left open (the DELETE route asks for them, so a bare DELETE wipes nothing)."""
    q: dict[str, str] = {}
    for name in ("resource_type", "operation", "permission"):
        v = getattr(flt, name)
        if v is not None:
            q[name] = str(v)
        elif explicit_any:
            q[name] = "ANY"
    q["pattern_type"] = flt.pattern_type
    for name in ("principal", "host", "resource_name"):
        v = getattr(flt, name)
        if v is not None:
            q[name] = v
    return q


class Admin:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        auth: tuple[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        urls = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        self.urls = [u.strip().rstrip("/") for u in urls if u.strip()]
        if not self.urls:
            raise ValueError("Admin needs at least one broker URL")
        self.timeout_s = timeout_s
        self._ssl = ssl_context
        self._headers = {"Content-Type": "application/json"}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        if security is not None:  # the TLS and credentials the other clients take
            self._ssl = self._ssl or security.ssl_context()
            authorization = security.authorization()
            if authorization is not None:
                self._headers["Authorization"] = authorization
        self._url = ""
        self._cluster_id: str | None = None

    # ---------------------------------------------------------------- HTTP

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        errors = []
        for url in ([self._url] if self._url else []) + [u for u in self.urls if u != self._url]:
            req = urllib.request.Request(
                url + path, data=data, method=method, headers=self._headers
            )
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl) as r:
                    raw = r.read()
                    self._url = url
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                raw = e.read()
                try:
                    err = json.loads(raw)
                    code, message = str(err["error_code"]), str(err["message"])
                except (ValueError, KeyError, TypeError):
                    code, message = str(e.code), raw[:200].decode(errors="replace")
                raise ClientError(code, f"{message} (HTTP {e.code})") from None
            except (urllib.error.URLError, OSError) as e:
                errors.append(f"{url}: {getattr(e, 'reason', e)}")
        raise ClientError("NETWORK_EXCEPTION", "no broker answered: " + "; ".join(errors))

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            body = self._request("GET", "/v3/clusters")
            self._cluster_id = str(body["data"][0]["cluster_id"])
        return self._cluster_id

    def _v3(self, path: str, query: dict[str, str] | None = None) -> str:
        qs = f"?{urllib.parse.urlencode(query)}" if query else ""
        return f"/v3/clusters/{self.cluster_id}{path}{qs}"

    # ---------------------------------------------------------------- ACLs

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Adds every binding, or none (one already present is kept, not doubled)."""
        data = [acl_body(b) for b in bindings]
        if not data:
            raise ValueError("no ACL bindings to create")
        self._request("POST", self._v3("/acls:batch"), {"data": data})

    def describe_acls(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings ``flt`` matches (every binding when None)."""
        q = filter_query(flt or AclBindingFilter(), explicit_any=False)
        body = self._request("GET", self._v3("/acls", q))
        return [acl_of_json(d) for d in body["data"]]

    def delete_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """Removes the bindings ``flt`` matches; returns them."""
        body = self._request("DELETE", self._v3("/acls", filter_query(flt, explicit_any=True)))
        return [acl_of_json(d) for d in body["data"]]

    # ---------------------------------------------------------------- SCRAM users

    def describe_users(self) -> dict[str, list[ScramCredentialInfo]]:
        """User name -> its credentials' mechanisms and iteration counts."""
        body = self._request("GET", self._v3("/users"))
        return {
            u["user_name"]: [
                ScramCredentialInfo(c["mechanism"], int(c["iterations"])) for c in u["credentials"]
            ]
            for u in body["data"]
        }

    def upsert_user(
        self,
        user: str,
        password: str,
        *,
        mechanism: str = "SCRAM-SHA-256",
        iterations: int | None = None,
    ) -> None:
        """Sets (or replaces) ``user``'s credential for ``mechanism``; the broker salts it."""
        body: dict[str, Any] = {"user_name": user, "password": password, "mechanism": mechanism}
        if iterations is not None:
            body["iterations"] = iterations
        self._request("POST", self._v3("/users"), body)

    def delete_user(self, user: str, *, mechanism: str | None = None) -> None:
        """Removes ``user``'s credential for ``mechanism``, or all of them."""
        q = {"mechanism": mechanism} if mechanism else None
        self._request("DELETE", self._v3(f"/users/{urllib.parse.quote(user, safe='')}", q))
