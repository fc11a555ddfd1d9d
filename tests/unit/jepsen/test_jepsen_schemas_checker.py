"""The schemas workload's checker on hand-made histories: a clean one is valid, and each
anomaly it names is found (and makes the history invalid)."""

from __future__ import annotations

from typing import Any

from jepsen_builder import H

from jepsen_tests.checkers.schemas import check
from jepsen_tests.history import (
    READ_SCHEMA_ID,
    READ_SUBJECT,
    READ_SUBJECT_VERSION,
    REGISTER_SCHEMA,
)
from jepsen_tests.workloads.schemas import schema_key, schema_text

S = "jepsen-0-value"


def reg(h: H, p: int, subject: str, schema: str, id_: int | None, type: str = "ok") -> H:
    inv = {"subject": subject, "schema": schema}
    return h.op(p, REGISTER_SCHEMA, inv, type, {**inv, "id": id_} if type == "ok" else None)


def read_id(h: H, p: int, id_: int, schema: str | None) -> H:
    return h.op(p, READ_SCHEMA_ID, {"id": id_}, "ok", {"id": id_, "schema": schema})


def read_version(h: H, p: int, version: str, got: int, id_: int, schema: str) -> H:
    inv = {"subject": S, "version": version}
    res = {**inv, "found": True, "version_got": got, "id": id_, "schema": schema}
    return h.op(p, READ_SUBJECT_VERSION, inv, "ok", res)


def final(h: H, versions: list[tuple[int, int, str]], subject: str = S) -> H:
    vs: list[dict[str, Any]] = [{"version": v, "id": i, "schema": k} for v, i, k in versions]
    inv = {"subject": subject}
    return h.op(10_000, READ_SUBJECT, inv, "ok", {**inv, "versions": vs})


def clean() -> H:
    h = H()
    reg(h, 0, S, "f1", 1)
    reg(h, 1, S, "f1,f2", 2)
    reg(h, 0, S, "f1", 1)  # the same schema again: the same id, no new version
    reg(h, 2, S, "f1,f2,f3", None, type="info")  # unknown: may or may not be there
    reg(h, 3, S, "f1,f2,f3,f4", None, type="fail")
    read_id(h, 1, 2, "f1,f2")
    read_id(h, 1, 2, None)  # a broker not caught up yet: counted, not an anomaly
    read_version(h, 0, "latest", 2, 2, "f1,f2")
    read_version(h, 0, "1", 1, 1, "f1")
    return h


def test_a_clean_history_is_valid() -> None:
    r = check(final(clean(), [(1, 1, "f1"), (2, 2, "f1,f2")]).history())
    assert r["valid"] is True, r
    assert r["acknowledged_registrations"] == 3
    assert r["counts"]["id-not-found"] == 1


def test_an_indefinite_registration_may_appear() -> None:
    r = check(final(clean(), [(1, 1, "f1"), (2, 2, "f1,f2"), (3, 3, "f1,f2,f3")]).history())
    assert r["valid"] is True, r


def test_a_lost_registration_is_found() -> None:
    r = check(final(clean(), [(1, 1, "f1")]).history())
    assert r["valid"] is False
    assert r["anomaly_types"] == ["lost-registration"]
    assert r["anomalies"]["lost-registration"][0]["id"] == 2


def test_a_registration_kept_under_another_id_is_lost_and_changed() -> None:
    r = check(final(clean(), [(1, 1, "f1"), (2, 7, "f1,f2")]).history())
    assert "lost-registration" in r["anomaly_types"]
    assert "id-changed" in r["anomaly_types"]


def test_an_id_given_to_two_schemas_is_found() -> None:
    h = clean()
    reg(h, 3, "jepsen-1-value", "f1,f2,f3,f4,f5", 2)
    final(h, [(1, 1, "f1"), (2, 2, "f1,f2")])
    r = check(final(h, [(1, 2, "f1,f2,f3,f4,f5")], subject="jepsen-1-value").history())
    assert r["anomaly_types"] == ["id-reused"]
    assert r["anomalies"]["id-reused"][0] == {"id": 2, "schemas": ["f1,f2", "f1,f2,f3,f4,f5"]}


def test_the_same_schema_answered_two_ids_is_found() -> None:
    h = clean()
    reg(h, 0, S, "f1", 5)
    r = check(final(h, [(1, 1, "f1"), (2, 2, "f1,f2")]).history())
    assert r["valid"] is False
    assert "id-changed" in r["anomaly_types"]


def test_a_read_by_id_of_another_schema_is_found() -> None:
    h = clean()
    read_id(h, 2, 1, "f1,f2,f3")
    r = check(final(h, [(1, 1, "f1"), (2, 2, "f1,f2")]).history())
    assert "wrong-schema-read" in r["anomaly_types"]
    assert r["anomalies"]["wrong-schema-read"][0]["registered"] == "f1"


def test_versions_with_a_gap_are_found() -> None:
    r = check(final(clean(), [(1, 1, "f1"), (3, 2, "f1,f2")]).history())
    assert r["anomaly_types"] == ["versions-not-dense"]


def test_a_read_of_version_n_answering_another_version_is_found() -> None:
    h = clean()
    read_version(h, 0, "2", 1, 1, "f1")
    r = check(final(h, [(1, 1, "f1"), (2, 2, "f1,f2")]).history())
    assert r["anomaly_types"] == ["versions-not-dense"]


def test_a_schema_under_two_versions_is_found() -> None:
    r = check(final(clean(), [(1, 1, "f1"), (2, 2, "f1,f2"), (3, 1, "f1")]).history())
    assert r["anomaly_types"] == ["duplicate-version"]


def test_a_version_no_one_registered_is_found() -> None:
    r = check(final(clean(), [(1, 1, "f1"), (2, 2, "f1,f2"), (3, 9, "f1,f2,f3,f4,f5")]).history())
    assert r["anomaly_types"] == ["phantom-version"]


def test_without_a_final_read_the_verdict_is_unknown() -> None:
    r = check(clean().history())
    assert r["valid"] == "unknown"
    assert r["unread_subjects"] == [S]


def test_schema_keys_name_the_fields_whatever_the_formatting() -> None:
    assert schema_key(schema_text(3)) == "f1,f2,f3"
    assert schema_key(' {"fields": [{"name": "f1"}], "type":"record"}') == "f1"
    assert schema_key("not json").startswith("?")
