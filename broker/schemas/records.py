"""Records of the compacted ``_schemas`` topic, in the shapes Confluent's registry writes.

Keys and values are compact JSON. Compaction keeps the last value per key, so each key names
exactly one thing that can change:

* ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``: one version of a subject.
  Value ``{"subject","version","id","schemaType"?,"references"?,"schema","deleted"}``
  (``schemaType`` left out for AVRO, as Confluent does); a soft delete rewrites it with
  ``"deleted":true``; a hard delete is a tombstone (value ``None``).
* ``{"keytype":"CONFIG","subject":S|null,"magic":0}``: a compatibility level
  ``{"compatibilityLevel":L}``; a tombstone removes it (null subject: the global level).
* ``{"keytype":"MODE","subject":S|null,"magic":0}``: ``{"mode":M}``, likewise.
* ``{"keytype":"MAX_ID","magic":0}``: ``{"maxId":N}``, Longboat's own: the highest schema id
  ever allocated. It is written with every new id and never deleted, so after every version
  holding the highest id is hard-deleted (and compacted away) a new writer still continues
  above it: ids are never reused.

Other key types Confluent writes (``NOOP``, ``DELETE_SUBJECT``, ``CLEAR_SUBJECT``) decode to
``None`` and are skipped on replay. A key or value that is not what its key type needs raises
``CorruptRecordError``.

Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from broker.schemas.parse import AVRO, Reference, SchemaText, compact
from storage.errors import CorruptRecordError

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
MAX_ID = "MAX_ID"


@dataclass(frozen=True)
class SchemaRecord:
    subject: str
    version: int
    id: int
    text: SchemaText
    deleted: bool = False


@dataclass(frozen=True)
class SchemaTombstone:
    """A hard-deleted version."""

    subject: str
    version: int


@dataclass(frozen=True)
class ConfigRecord:
    subject: str | None
    level: str | None
    """None: the config is removed."""


@dataclass(frozen=True)
class ModeRecord:
    subject: str | None
    mode: str | None


@dataclass(frozen=True)
class MaxIdRecord:
    max_id: int


Record = SchemaRecord | SchemaTombstone | ConfigRecord | ModeRecord | MaxIdRecord
KeyValue = tuple[bytes, bytes | None]


def _dump(obj: Any) -> bytes:
    return compact(obj).encode()


def encode_record(rec: Record) -> KeyValue:
    if isinstance(rec, SchemaRecord):
        key = _dump({"keytype": SCHEMA, "subject": rec.subject, "version": rec.version, "magic": 1})
        value: dict[str, Any] = {"subject": rec.subject, "version": rec.version, "id": rec.id}
        if rec.text.schema_type != AVRO:
            value["schemaType"] = rec.text.schema_type
        if rec.text.references:
            value["references"] = [r.to_json() for r in rec.text.references]
        value["schema"] = rec.text.schema
        value["deleted"] = rec.deleted
        return key, _dump(value)
    if isinstance(rec, SchemaTombstone):
        return _dump(
            {"keytype": SCHEMA, "subject": rec.subject, "version": rec.version, "magic": 1}
        ), None
    if isinstance(rec, ConfigRecord):
        key = _dump({"keytype": CONFIG, "subject": rec.subject, "magic": 0})
        return key, None if rec.level is None else _dump({"compatibilityLevel": rec.level})
    if isinstance(rec, ModeRecord):
        key = _dump({"keytype": MODE, "subject": rec.subject, "magic": 0})
        return key, None if rec.mode is None else _dump({"mode": rec.mode})
    return _dump({"keytype": MAX_ID, "magic": 0}), _dump({"maxId": rec.max_id})


def _str(d: dict[str, Any], k: str) -> str:
    v = d.get(k)
    if not isinstance(v, str):
        raise CorruptRecordError(f"_schemas record: {k!r} must be a string, got {v!r}")
    return v


def _int(d: dict[str, Any], k: str) -> int:
    v = d.get(k)
    if not isinstance(v, int) or isinstance(v, bool):
        raise CorruptRecordError(f"_schemas record: {k!r} must be an integer, got {v!r}")
    return v


def _subject_or_none(d: dict[str, Any]) -> str | None:
    v = d.get("subject")
    if v is not None and not isinstance(v, str):
        raise CorruptRecordError(f"_schemas record: bad subject {v!r}")
    return v


def _reference(r: Any) -> Reference:
    if not isinstance(r, dict):
        raise CorruptRecordError(f"_schemas record: bad reference {r!r}")
    return Reference(_str(r, "name"), _str(r, "subject"), _int(r, "version"))


def decode_record(key: bytes | None, value: bytes | None) -> Record | None:
    """The record, or None for a key type this registry does not use."""
    try:
        k = json.loads(key) if key is not None else None
        v = json.loads(value) if value is not None else None
    except ValueError as e:
        raise CorruptRecordError(f"_schemas record is not JSON: {e}") from None
    if not isinstance(k, dict):
        raise CorruptRecordError(f"_schemas key is not a JSON object: {key!r}")
    if v is not None and not isinstance(v, dict):
        raise CorruptRecordError(f"_schemas value is not a JSON object: {value!r}")
    kt = k.get("keytype")
    if kt == SCHEMA:
        subject, version = _str(k, "subject"), _int(k, "version")
        if v is None:
            return SchemaTombstone(subject, version)
        refs = v.get("references") or []
        if not isinstance(refs, list):
            raise CorruptRecordError("_schemas record: references must be a list")
        text = SchemaText(
            _str(v, "schemaType") if "schemaType" in v else AVRO,
            _str(v, "schema"),
            tuple(_reference(r) for r in refs),
        )
        return SchemaRecord(subject, version, _int(v, "id"), text, bool(v.get("deleted")))
    if kt == CONFIG:
        return ConfigRecord(
            _subject_or_none(k), None if v is None else _str(v, "compatibilityLevel")
        )
    if kt == MODE:
        return ModeRecord(_subject_or_none(k), None if v is None else _str(v, "mode"))
    if kt == MAX_ID:
        return MaxIdRecord(0 if v is None else _int(v, "maxId"))
    return None
