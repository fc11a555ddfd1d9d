"""Who a TLS client is, and how fast a source may fail to log in (issue 18): pure rules.

* ``subject_dn`` writes a certificate subject (as ``ssl.SSLSocket.getpeercert`` gives it) as
  an RFC 2253 distinguished name, the form Kafka's mapping rules see
  (``CN=alice,OU=eng,O=acme``: the last RDN of the certificate first).
* ``PrincipalMapper`` is Kafka's ``ssl.principal.mapping.rules``: comma- or newline-separated
  rules tried in order on the whole DN; ``RULE:pattern/replacement/`` applies when
  ``pattern`` matches the whole DN and yields the DN with ``replacement`` substituted
  (``$1`` names a group), lower-cased with a trailing ``L``, upper-cased with ``U``;
  ``DEFAULT`` yields the DN unchanged. No rule matching is an error (Kafka refuses the
  connection), as is a rule yielding an empty name.
* ``LoginThrottle`` slows a source address that keeps failing to authenticate: after
  ``free_failures`` failures, each attempt from it waits ``delay_ms_base`` doubled per further
  failure, up to ``delay_ms_max``; a success or ``forget_after_ms`` of quiet forgets it. It
  remembers at most ``sources_max`` addresses (the longest quiet is dropped first), so a
  flood from many addresses cannot grow it without bound.

Pure: no I/O, no clock (times are arguments).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from common.invariant import invariant

_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "EMAILADDRESS",
}

_RFC2253_SPECIAL = re.compile(r'([,+"\\<>;=])')


def _escape(value: str) -> str:
    out = _RFC2253_SPECIAL.sub(r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(subject: Any) -> str:
    """RFC 2253 text of a ``getpeercert()["subject"]``: RDNs in reverse order, the
    attributes of a multi-valued RDN joined by ``+``."""
    rdns = []
    for rdn in reversed(tuple(subject or ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(str(v))}" for k, v in rdn))
    return ",".join(rdns)


class PrincipalMappingError(ValueError):
    """A DN no rule maps, or rules that do not parse."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


_RULE = re.compile(
    r"\s*(?:(?P<default>DEFAULT)|RULE:(?P<pattern>(?:\\.|[^\\/])+)/(?P<repl>(?:\\.|[^\\/])*)/"
    r"(?P<case>[LU]?))\s*(?:[,\n]|$)"
)


def _java_replacement(repl: str) -> str:
    """Java's ``$1`` group references (and ``\\/`` for a slash) in Python's ``\\g<1>``."""
    repl = repl.replace("\\/", "/")
    return re.sub(r"\$(\d+)", r"\\g<\1>", repl)


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules`` (see the module docstring)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        pos, text = 0, rules.strip()
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise PrincipalMappingError(
                    f"bad ssl_principal_mapping_rules at {text[pos : pos + 40]!r}: expected "
                    "DEFAULT or RULE:pattern/replacement/[LU]"
                )
            if m["default"]:
                self.rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(m["pattern"].replace("\\/", "/"))
                except re.error as e:
                    raise PrincipalMappingError(f"bad rule pattern {m['pattern']!r}: {e}") from None
                self.rules.append(_Rule(pattern, _java_replacement(m["repl"]), m["case"]))
            pos = m.end()
        if not self.rules:
            raise PrincipalMappingError("ssl_principal_mapping_rules is empty: use DEFAULT")

    def name(self, dn: str) -> str:
        """The user name for ``dn`` (the principal is ``User:`` and this)."""
        for rule in self.rules:
            if rule.pattern is None:
                return dn
            if rule.pattern.fullmatch(dn) is None:
                continue
            out = rule.pattern.sub(rule.replacement, dn, count=1)
            if rule.case == "L":
                out = out.lower()
            elif rule.case == "U":
                out = out.upper()
            if not out:
                raise PrincipalMappingError(f"a rule maps {dn!r} to an empty name")
            return out
        raise PrincipalMappingError(f"no ssl_principal_mapping_rules rule matches {dn!r}")


@dataclass
class _Source:
    failures: int
    last_ms: int


class LoginThrottle:
    """Per-source slow-down after failed logins (see the module docstring)."""

    def __init__(
        self,
        *,
        free_failures: int = 5,
        delay_ms_base: int = 100,
        delay_ms_max: int = 5_000,
        forget_after_ms: int = 300_000,
        sources_max: int = 10_000,
    ) -> None:
        invariant(free_failures >= 0 and 0 < delay_ms_base <= delay_ms_max, "throttle bounds")
        self.free_failures = free_failures
        self.delay_ms_base = delay_ms_base
        self.delay_ms_max = delay_ms_max
        self.forget_after_ms = forget_after_ms
        self.sources_max = sources_max
        self._sources: OrderedDict[str, _Source] = OrderedDict()  # least recent first

    def delay_ms(self, source: str, now_ms: int) -> int:
        """How long an attempt from ``source`` waits before it is checked."""
        s = self._sources.get(source)
        if s is None:
            return 0
        if now_ms - s.last_ms >= self.forget_after_ms:
            del self._sources[source]
            return 0
        over = s.failures - self.free_failures
        if over < 0:
            return 0
        return min(self.delay_ms_max, self.delay_ms_base << min(over, 30))

    def on_failure(self, source: str, now_ms: int) -> int:
        """Count a failure; the source's failures in a row (within ``forget_after_ms``)."""
        s = self._sources.pop(source, None)
        if s is None or now_ms - s.last_ms >= self.forget_after_ms:
            s = _Source(0, now_ms)
        s.failures += 1
        s.last_ms = now_ms
        self._sources[source] = s
        while len(self._sources) > self.sources_max:
            self._sources.popitem(last=False)
        return s.failures

    def on_success(self, source: str) -> None:
        self._sources.pop(source, None)

    def __len__(self) -> int:
        return len(self._sources)
