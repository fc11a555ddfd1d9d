"""``RegistryState``: decisions, replay, and ids that outlive deletes and compaction.

A ``Log`` stands in for ``_schemas``: decisions are encoded and appended, and every state is
rebuilt by replaying decoded records, as the brokers do. ``compacted()`` keeps the last value
of each key and drops tombstones, as the cleaner eventually does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.schemas.parse import Reference, SchemaText, text_of
from broker.schemas.records import (
    ConfigRecord,
    MaxIdRecord,
    ModeRecord,
    SchemaRecord,
    SchemaTombstone,
    decode_record,
    encode_record,
)
from broker.schemas.state import LATEST, Decision, RegistryError, RegistryState, parse_version
from storage.errors import CorruptRecordError


class Log:
    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes | None]] = []
        self.state = RegistryState()

    def apply(self, d: Decision[Any]) -> Any:
        for r in d.records:
            k, v = encode_record(r)
            self.entries.append((k, v))
            rec = decode_record(k, v)
            assert rec is not None
            self.state.replay(rec)
        return d.response

    def compacted(self) -> RegistryState:
        last: dict[bytes, bytes | None] = {}
        for k, v in self.entries:
            last.pop(k, None)
            last[k] = v
        st = RegistryState()
        for k, v in last.items():
            if v is not None:
                rec = decode_record(k, v)
                assert rec is not None
                st.replay(rec)
        return st


def avro(name: str, *fields: dict[str, Any]) -> SchemaText:
    return text_of(None, json.dumps({"type": "record", "name": name, "fields": list(fields)}))


def code(e: pytest.ExceptionInfo[RegistryError]) -> int:
    return e.value.error_code


A = avro("A", {"name": "x", "type": "int"})
B = avro("B", {"name": "y", "type": "string"})


def test_ids_are_never_reused_after_hard_deletes_and_compaction() -> None:
    log = Log()
    st = log.state
    assert log.apply(st.decide_register("s", A)) == {"id": 1}
    assert log.apply(st.decide_register("t", B)) == {"id": 2}
    for subject in ("t", "s"):
        log.apply(st.decide_delete_subject(subject))
        log.apply(st.decide_delete_subject(subject, permanent=True))
    assert st.texts == {} and st.max_id == 2
    # A new writer rebuilt from the compacted log (no schema record left at all) still
    # continues above 2, because MAX_ID is never deleted.
    fresh = log.compacted()
    assert fresh.subjects == {} and fresh.max_id == 2
    assert fresh.decide_register("s", A).response == {"id": 3}


def test_same_schema_same_id_across_subjects_and_formatting() -> None:
    log = Log()
    st = log.state
    assert log.apply(st.decide_register("s", A)) == {"id": 1}
    spaced = text_of("AVRO", json.dumps(json.loads(A.schema), indent=4))
    d = st.decide_register("s", spaced)
    assert d.records == () and d.response == {"id": 1}  # nothing written
    assert log.apply(st.decide_register("other", spaced)) == {"id": 1}
    assert st.versions_of_id(1) == [
        {"subject": "other", "version": 1},
        {"subject": "s", "version": 1},
    ]


def test_normalize_makes_namespace_spellings_one_schema() -> None:
    log = Log()
    st = log.state
    dotted = text_of(None, '{"type":"record","name":"ns.A","fields":[]}')
    split = text_of(None, '{"type":"record","name":"A","namespace":"ns","fields":[]}')
    log.apply(st.decide_register("s", dotted))
    assert st.decide_register("s", split, normalize=True).records == ()
    with pytest.raises(RegistryError) as e:
        st.lookup("s", split)
    assert code(e) == 40403
    assert st.lookup("s", split, normalize=True)["version"] == 1


def test_versions_and_soft_then_hard_deletes() -> None:
    log = Log()
    st = log.state
    log.apply(st.decide_register("s", A))
    log.apply(st.decide_set_config("s", "NONE"))
    log.apply(st.decide_register("s", B))
    assert st.list_versions("s") == [1, 2]
    with pytest.raises(RegistryError) as e:
        st.decide_delete_version("s", 2, permanent=True)
    assert code(e) == 40407
    assert log.apply(st.decide_delete_version("s", LATEST)) == 2
    with pytest.raises(RegistryError) as e:
        st.decide_delete_version("s", 2)
    assert code(e) == 40406
    assert st.get_version("s", LATEST)["version"] == 1
    assert st.get_version("s", 2, deleted=True)["id"] == 2
    # The next version is 3: a soft-deleted version keeps its number.
    log.apply(st.decide_register("s", avro("C")))
    assert st.list_versions("s", deleted=True) == [1, 2, 3]
    log.apply(st.decide_delete_subject("s"))
    with pytest.raises(RegistryError) as e:
        st.list_versions("s")
    assert code(e) == 40401
    assert log.apply(st.decide_delete_subject("s", permanent=True)) == [1, 2, 3]
    assert st.subjects == {} and "s" not in st.configs  # its config went with it


def test_references_resolve_and_pin_what_they_reference() -> None:
    log = Log()
    st = log.state
    address = text_of(
        None,
        json.dumps(
            {
                "type": "record",
                "name": "Address",
                "namespace": "acme",
                "fields": [{"name": "street", "type": "string"}],
            }
        ),
    )
    log.apply(st.decide_register("address", address))
    user = SchemaText(
        "AVRO",
        json.dumps(
            {
                "type": "record",
                "name": "User",
                "namespace": "acme",
                "fields": [{"name": "home", "type": "Address"}],
            }
        ),
        (Reference("acme.Address", "address", LATEST),),
    )
    assert log.apply(st.decide_register("user", user)) == {"id": 2}
    # "latest" is stored as the version it named.
    assert st.get_version("user", 1)["references"] == [
        {"name": "acme.Address", "subject": "address", "version": 1}
    ]
    assert st.referenced_by("address", 1) == [2]
    with pytest.raises(RegistryError) as e:
        st.decide_delete_version("address", 1)
    assert code(e) == 42206
    # Unknown names and missing references are invalid schemas.
    with pytest.raises(RegistryError) as e:
        st.decide_register("user", SchemaText("AVRO", user.schema))
    assert code(e) == 42201
    with pytest.raises(RegistryError) as e:
        st.decide_register(
            "user", SchemaText("AVRO", user.schema, (Reference("acme.Address", "nowhere", 1),))
        )
    assert code(e) == 42201


def test_json_schema_references_by_uri() -> None:
    log = Log()
    st = log.state
    addr = text_of(
        "JSON", json.dumps({"type": "object", "properties": {"street": {"type": "string"}}})
    )
    log.apply(st.decide_register("addr", addr))
    user = SchemaText(
        "JSON",
        json.dumps({"type": "object", "properties": {"home": {"$ref": "addr.json"}}}),
        (Reference("addr.json", "addr", 1),),
    )
    assert log.apply(st.decide_register("user", user)) == {"id": 2}
    with pytest.raises(RegistryError) as e:
        st.decide_register("user2", SchemaText("JSON", user.schema))  # $ref unresolvable
    assert code(e) == 42201


def test_modes_readonly_and_import() -> None:
    log = Log()
    st = log.state
    log.apply(st.decide_register("s", A))
    with pytest.raises(RegistryError) as e:
        st.decide_register("s", B, schema_id=50)
    assert code(e) == 42205  # ids are chosen only in IMPORT mode
    with pytest.raises(RegistryError) as e:
        st.decide_set_mode(None, "IMPORT")
    assert code(e) == 42205  # not on a registry with subjects, without force
    log.apply(st.decide_set_mode("imp", "IMPORT"))
    assert log.apply(st.decide_register("imp", B, schema_id=50, version=7)) == {"id": 50}
    assert st.get_version("imp", 7)["id"] == 50 and st.max_id == 50
    with pytest.raises(RegistryError) as e:
        st.decide_register("imp", avro("C"), schema_id=50)
    assert code(e) == 42207  # id 50 is another schema
    log.apply(st.decide_set_mode("s", "READONLY"))
    with pytest.raises(RegistryError) as e:
        st.decide_register("s", B)
    assert code(e) == 42205
    assert log.apply(st.decide_delete_mode("s")) == {"mode": "READONLY"}
    assert log.apply(
        st.decide_register(
            "s", avro("A", {"name": "x", "type": "int"}, {"name": "z", "type": "int", "default": 1})
        )
    ) == {"id": 51}


def test_bad_inputs_have_the_registry_codes() -> None:
    st = RegistryState()
    for spec, ok in (("latest", LATEST), ("-1", LATEST), ("1", 1), (2**31 - 1, 2**31 - 1)):
        assert parse_version(spec) == ok
    for spec in ("0", "abc", "-2", 2**31):
        with pytest.raises(RegistryError) as e:
            parse_version(spec)
        assert code(e) == 42202
    for bad, c in (
        (lambda: st.decide_set_config(None, "SIDEWAYS"), 42203),
        (lambda: st.decide_set_mode(None, "SOMETIMES"), 42204),
        (lambda: st.decide_register("", A), 42208),
        (lambda: st.get_config("s"), 40408),
        (lambda: st.get_mode("s"), 40409),
        (lambda: st.get_schema(1), 40403),
    ):
        with pytest.raises(RegistryError) as e:
            bad()
        assert code(e) == c
    assert st.get_config("s", default_to_global=True) == {"compatibilityLevel": "BACKWARD"}


@pytest.mark.parametrize(
    "rec",
    [
        SchemaRecord("s", 1, 3, SchemaText("JSON", "{}", (Reference("n", "t", 2),)), True),
        SchemaRecord("s", 1, 3, SchemaText("AVRO", '"int"')),
        SchemaTombstone("s", 1),
        ConfigRecord(None, "FULL"),
        ConfigRecord("s", None),
        ModeRecord("s", "READONLY"),
        ModeRecord(None, None),
        MaxIdRecord(9),
    ],
)
def test_records_round_trip(rec: Any) -> None:
    assert decode_record(*encode_record(rec)) == rec


def test_foreign_and_corrupt_records() -> None:
    assert decode_record(b'{"keytype":"NOOP","magic":0}', None) is None
    for k, v in (
        (b"not json", b"{}"),
        (b'{"keytype":"SCHEMA"}', b"{}"),
        (b'{"keytype":"SCHEMA","subject":"s","version":1}', b'{"id":"x"}'),
        (None, None),
    ):
        with pytest.raises(CorruptRecordError):
            decode_record(k, v)
