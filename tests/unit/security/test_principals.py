"""Kafka's ssl.principal.mapping.rules, the DN writer and the failed-login throttle."""

from __future__ import annotations

import pytest

from api.http.principals import LoginThrottle, PrincipalMapper, PrincipalMappingError, subject_dn

SUBJECT = (
    (("countryName", "US"),),
    (("organizationName", "Acme, Inc."),),
    (("organizationalUnitName", "ServiceUsers"),),
    (("commonName", "Alice"),),
)


def test_subject_dn_is_rfc2253_last_rdn_first_with_escapes() -> None:
    assert subject_dn(SUBJECT) == r"CN=Alice,OU=ServiceUsers,O=Acme\, Inc.,C=US"


def test_default_rule_keeps_the_whole_dn() -> None:
    assert PrincipalMapper().name("CN=a,O=b") == "CN=a,O=b"


def test_rules_apply_in_order_with_groups_and_case() -> None:
    m = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U,DEFAULT"
    )
    assert m.name(subject_dn(SUBJECT)) == "alice"
    assert m.name("CN=bob,OU=eng,O=x") == "BOB@ENG"
    assert m.name("O=nobody") == "O=nobody"


def test_no_matching_rule_is_refused() -> None:
    m = PrincipalMapper("RULE:^CN=(.*)$/$1/")
    assert m.name("CN=node-1") == "node-1"
    with pytest.raises(PrincipalMappingError):
        m.name("O=x,CN=y")


@pytest.mark.parametrize("rules", ["", "RULE:broken", "NOPE", "RULE:(/x/"])
def test_bad_rules_are_refused(rules: str) -> None:
    with pytest.raises(PrincipalMappingError):
        PrincipalMapper(rules)


def test_throttle_slows_only_after_free_failures_and_doubles_to_the_cap() -> None:
    t = LoginThrottle(free_failures=2, delay_ms_base=100, delay_ms_max=400, forget_after_ms=1000)
    assert t.delay_ms("a", 0) == 0
    t.on_failure("a", 0)
    t.on_failure("a", 1)
    assert t.delay_ms("a", 2) == 100
    t.on_failure("a", 2)
    assert t.delay_ms("a", 3) == 200
    for i in range(10):
        t.on_failure("a", 4 + i)
    assert t.delay_ms("a", 20) == 400
    assert t.delay_ms("b", 20) == 0  # per source
    assert t.delay_ms("a", 20 + 1000) == 0  # forgotten after a quiet period
    t.on_failure("c", 0)
    t.on_failure("c", 0)
    t.on_failure("c", 0)
    t.on_success("c")
    assert t.delay_ms("c", 1) == 0


def test_throttle_remembers_a_bounded_number_of_sources() -> None:
    t = LoginThrottle(sources_max=3)
    for i in range(10):
        t.on_failure(f"10.0.0.{i}", i)
    assert len(t) == 3
