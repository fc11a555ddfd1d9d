"""``RegistryState``: the registry's subjects, versions, ids, configs and modes, from records.

Every broker builds one by replaying ``_schemas`` (``replay``); only ``replay`` changes it.
Reads are methods that answer from it or raise ``RegistryError`` with the registry's error
code. Writes are ``decide_*`` methods that change nothing: they return a ``Decision`` (the
records to append and the answer to give once they are committed), in the shape of Kafka's
``ControllerResult``. The single writer (``registry.SchemaRegistry`` on the leader of
``_schemas`` partition 0) decides from a state that has replayed every committed record, so
its decisions never clash: ids come from ``max_id``, which replay keeps at the highest id any
record ever carried (``MaxIdRecord`` included), so a new writer continues above every id ever
written, deleted ones too.

Rules (Confluent's): a subject's versions count up from 1 and are never reused while any
record of the subject remains; the same schema registered in a subject again is answered with
its version's id and writes nothing; the same schema in another subject gets the same id; a
soft delete hides a version (``?deleted=true`` shows it), a hard delete (``permanent``) needs
a soft delete first and removes it; a version that a live schema references cannot be
deleted. Compatibility is checked against the subject's live versions, newest first: the
latest only, or all for the ``_TRANSITIVE`` levels; ``IMPORT`` mode skips it and may set ids
and versions.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from broker.schemas.parse import (
    AVRO,
    InvalidSchemaError,
    ParsedSchema,
    Reference,
    SchemaText,
    identity,
    incompatibilities,
    parse,
    text_of,
)
from broker.schemas.records import (
    ConfigRecord,
    MaxIdRecord,
    ModeRecord,
    Record,
    SchemaRecord,
    SchemaTombstone,
)

R = TypeVar("R")

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"
VERSION_MAX = 2**31 - 1
ID_MAX = 2**31 - 1
LATEST = -1

# Confluent's error codes (io.confluent.kafka.schemaregistry.rest.exceptions.Errors).
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMAVERSION_SOFT_DELETED = 40406
SCHEMAVERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
ID_DOES_NOT_MATCH = 42207
INVALID_SUBJECT = 42208
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_FAILED = 50003


class RegistryError(Exception):
    """A refusal with the registry's error code; ``status`` is the HTTP status it implies."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.error_code if self.error_code < 1000 else self.error_code // 100


@dataclass(frozen=True)
class Decision(Generic[R]):
    records: tuple[Record, ...]
    response: R


@dataclass(frozen=True)
class Entry:
    """One version of a subject."""

    id: int
    deleted: bool


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def parse_version(spec: str | int) -> int:
    """A version from a path or a body: 1..2^31-1, or ``latest``/-1 (``LATEST``)."""
    if isinstance(spec, str):
        if spec.lower() == "latest":
            return LATEST
        try:
            v = int(spec)
        except ValueError:
            v = 0
    else:
        v = spec
    if v == LATEST or 1 <= v <= VERSION_MAX:
        return v
    raise RegistryError(
        INVALID_VERSION,
        f"The specified version '{spec}' is not a valid version id. Allowed "
        f'values are between [1, 2^31-1] and the string "latest"',
    )


def check_subject(subject: str) -> None:
    if not subject or any(ord(c) < 0x20 for c in subject) or subject != subject.strip():
        raise RegistryError(INVALID_SUBJECT, f"The specified subject '{subject}' is not valid.")


def check_level(level: Any) -> str:
    if isinstance(level, str) and level.upper() in LEVELS:
        return level.upper()
    raise RegistryError(
        INVALID_COMPATIBILITY_LEVEL,
        "Invalid compatibility level. Valid values are none, backward, forward, "
        "full, backward_transitive, forward_transitive, and full_transitive",
    )


def check_mode(mode: Any) -> str:
    if isinstance(mode, str) and mode.upper() in MODES:
        return mode.upper()
    raise RegistryError(
        INVALID_MODE,
        "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.",
    )


def schema_json(text: SchemaText) -> dict[str, Any]:
    """The ``schemaType``/``references``/``schema`` part of an answer (AVRO's type left out,
    as Confluent does)."""
    out: dict[str, Any] = {}
    if text.schema_type != AVRO:
        out["schemaType"] = text.schema_type
    if text.references:
        out["references"] = [r.to_json() for r in text.references]
    out["schema"] = text.schema
    return out


class RegistryState:
    """See the module docstring."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, Entry]] = {}
        """subject -> version -> entry. Invariant: no empty inner dict."""
        self.texts: dict[int, SchemaText] = {}
        """Every id some version holds. Invariant: ``texts`` keys == ids in ``subjects``."""
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        """The highest id any replayed record carried. Never decreases."""
        self._holders: dict[int, set[tuple[str, int]]] = {}
        self._identity: dict[int, str] = {}
        self._parsed: dict[int, ParsedSchema] = {}

    # ------------------------------------------------------------ replay

    def replay(self, rec: Record) -> None:
        if isinstance(rec, SchemaRecord):
            self._drop_version(rec.subject, rec.version)
            self.subjects.setdefault(rec.subject, {})[rec.version] = Entry(rec.id, rec.deleted)
            if self.texts.get(rec.id) != rec.text:
                self.texts[rec.id] = rec.text
                self._identity[rec.id] = identity(rec.text)
                self._parsed.pop(rec.id, None)
            self._holders.setdefault(rec.id, set()).add((rec.subject, rec.version))
            self.max_id = max(self.max_id, rec.id)
        elif isinstance(rec, SchemaTombstone):
            self._drop_version(rec.subject, rec.version)
        elif isinstance(rec, ConfigRecord):
            if rec.level is None:
                self.configs.pop(rec.subject, None)
            else:
                self.configs[rec.subject] = rec.level
        elif isinstance(rec, ModeRecord):
            if rec.mode is None:
                self.modes.pop(rec.subject, None)
            else:
                self.modes[rec.subject] = rec.mode
        else:
            self.max_id = max(self.max_id, rec.max_id)

    def _drop_version(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        entry = None if versions is None else versions.pop(version, None)
        if entry is None:
            return
        assert versions is not None
        if not versions:
            del self.subjects[subject]
        holders = self._holders[entry.id]
        holders.discard((subject, version))
        if not holders:  # no version holds the id any more: it is gone (never reused)
            del self._holders[entry.id], self.texts[entry.id], self._identity[entry.id]
            self._parsed.pop(entry.id, None)

    # ------------------------------------------------------------ lookups

    def versions_of(self, subject: str, deleted: bool = False) -> list[int]:
        return sorted(
            v for v, e in self.subjects.get(subject, {}).items() if deleted or not e.deleted
        )

    def _versions_or_raise(self, subject: str, deleted: bool) -> list[int]:
        vs = self.versions_of(subject, deleted)
        if not vs:
            raise subject_not_found(subject)
        return vs

    def _version_or_raise(self, subject: str, version: int, deleted: bool) -> tuple[int, Entry]:
        vs = self._versions_or_raise(subject, deleted)
        v = vs[-1] if version == LATEST else version
        if v not in vs:
            raise RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")
        return v, self.subjects[subject][v]

    def _lookup_reference(self, ref: Reference) -> SchemaText:
        vs = self.versions_of(ref.subject, deleted=True)
        v = vs[-1] if ref.version == LATEST and vs else ref.version
        entry = self.subjects.get(ref.subject, {}).get(v)
        if entry is None:
            raise InvalidSchemaError(
                f"Invalid schema: reference {ref.name!r} to subject "
                f"'{ref.subject}' version {ref.version} not found"
            )
        return self.texts[entry.id]

    def parsed(self, schema_id: int) -> ParsedSchema:
        p = self._parsed.get(schema_id)
        if p is None:
            p = parse(self.texts[schema_id], self._lookup_reference)
            self._parsed[schema_id] = p
        return p

    def level(self, subject: str | None) -> str:
        return self.configs.get(subject) or self.configs.get(None) or DEFAULT_LEVEL

    def mode(self, subject: str | None) -> str:
        return self.modes.get(subject) or self.modes.get(None) or DEFAULT_MODE

    # ------------------------------------------------------------ reads (the public API)

    def list_subjects(self, prefix: str = "", deleted: bool = False) -> list[str]:
        return sorted(
            s for s in self.subjects if s.startswith(prefix) and self.versions_of(s, deleted)
        )

    def list_versions(self, subject: str, deleted: bool = False) -> list[int]:
        return self._versions_or_raise(subject, deleted)

    def get_version(self, subject: str, version: int, deleted: bool = False) -> dict[str, Any]:
        v, entry = self._version_or_raise(subject, version, deleted)
        return {
            "subject": subject,
            "version": v,
            "id": entry.id,
            **schema_json(self.texts[entry.id]),
        }

    def referenced_by(self, subject: str, version: int) -> list[int]:
        v, _ = self._version_or_raise(subject, version, deleted=True)
        return sorted(
            {
                e.id
                for s, vs in self.subjects.items()
                for e in vs.values()
                if not e.deleted
                and any(
                    r.subject == subject and r.version == v for r in self.texts[e.id].references
                )
            }
        )

    def get_schema(self, schema_id: int) -> dict[str, Any]:
        """``GET /schemas/ids/{id}`` (its ``subject`` parameter names a context in Confluent's
        registry, which has one context here: it is ignored)."""
        text = self.texts.get(schema_id)
        if text is None:
            raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")
        return schema_json(text)

    def subjects_of_id(self, schema_id: int, deleted: bool = False) -> list[str]:
        return sorted({sv["subject"] for sv in self.versions_of_id(schema_id, deleted)})

    def versions_of_id(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        if schema_id not in self.texts:
            raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")
        return [
            {"subject": s, "version": v}
            for s, v in sorted(self._holders[schema_id])
            if deleted or not self.subjects[s][v].deleted
        ]

    def list_schemas(
        self, prefix: str = "", deleted: bool = False, latest_only: bool = False
    ) -> list[dict[str, Any]]:
        out = []
        for s in self.list_subjects(prefix, deleted):
            vs = self.versions_of(s, deleted)
            for v in vs[-1:] if latest_only else vs:
                out.append(self.get_version(s, v, deleted=True))
        return out

    def _parse_request(self, text: SchemaText) -> ParsedSchema:
        try:
            return parse(text, self._lookup_reference)
        except InvalidSchemaError as e:
            raise RegistryError(INVALID_SCHEMA, str(e)) from None

    def _same_in_subject(
        self, subject: str, new: ParsedSchema, normalize: bool, deleted: bool
    ) -> tuple[int, Entry] | None:
        want = new.normalized() if normalize else identity(new.text)
        for v in reversed(self.versions_of(subject, deleted)):
            e = self.subjects[subject][v]
            have = self.parsed(e.id).normalized() if normalize else self._identity[e.id]
            if have == want:
                return v, e
        return None

    def lookup(
        self, subject: str, text: SchemaText, normalize: bool = False, deleted: bool = False
    ) -> dict[str, Any]:
        """``POST /subjects/{subject}``: the version holding this schema."""
        self._versions_or_raise(subject, deleted)
        new = self._parse_request(text)
        hit = self._same_in_subject(subject, new, normalize, deleted)
        if hit is None:
            raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")
        v, e = hit
        return {"subject": subject, "version": v, "id": e.id, **schema_json(self.texts[e.id])}

    def compatibility(
        self, subject: str, text: SchemaText, version: int | None, normalize: bool = False
    ) -> list[str]:
        """Why ``text`` may not be registered next to ``version`` (None: as many versions as
        the subject's level asks for). Empty: compatible."""
        _ = normalize  # identity does not matter to the check
        new = self._parse_request(text)
        level = self.level(subject)
        if version is None:
            return self._incompatibilities(subject, new, level)
        _, entry = self._version_or_raise(subject, version, deleted=False)
        return _level_check(level, new, [self.parsed(entry.id)])

    def _incompatibilities(self, subject: str, new: ParsedSchema, level: str) -> list[str]:
        live = list(reversed(self.versions_of(subject)))
        if level == "NONE" or not live:
            return []
        if not level.endswith("_TRANSITIVE"):
            live = live[:1]
        olds = []
        for v in live:
            try:
                olds.append(self.parsed(self.subjects[subject][v].id))
            except InvalidSchemaError as e:
                return [f"version {v} of '{subject}' no longer parses: {e}"]
        return _level_check(level, new, olds)

    # ------------------------------------------------------------ writes

    def _writable_or_raise(self, subject: str | None) -> str:
        mode = self.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise RegistryError(
                OPERATION_NOT_PERMITTED,
                f"Subject {subject} is in read-only mode"
                if subject
                else "The registry is in read-only mode",
            )
        return mode

    def decide_register(
        self,
        subject: str,
        text: SchemaText,
        *,
        normalize: bool = False,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> Decision[dict[str, Any]]:
        """``POST /subjects/{subject}/versions``: answers ``{"id": ...}``."""
        check_subject(subject)
        mode = self._writable_or_raise(subject)
        if (schema_id is not None or version is not None) and mode != "IMPORT":
            raise RegistryError(
                OPERATION_NOT_PERMITTED,
                f"Subject {subject} is not in import mode: a registration "
                f"cannot choose its id or version",
            )
        # References to "latest" are stored as the version they name now.
        text = SchemaText(
            text.schema_type,
            text.schema,
            tuple(
                Reference(r.name, r.subject, self._resolve_reference_version(r))
                for r in text.references
            ),
        )
        new = self._parse_request(text)
        same = self._same_in_subject(subject, new, normalize, deleted=False)
        if same is not None and (schema_id is None or same[1].id == schema_id):
            return Decision((), {"id": same[1].id})
        if mode != "IMPORT":
            problems = self._incompatibilities(subject, new, self.level(subject))
            if problems:
                raise RegistryError(
                    INCOMPATIBLE_SCHEMA,
                    "Schema being registered is incompatible with an earlier "
                    'schema for subject "' + subject + '", details: ' + "; ".join(problems),
                )
        wanted = identity(text)
        if schema_id is not None:
            if not 1 <= schema_id <= ID_MAX:
                raise RegistryError(ID_DOES_NOT_MATCH, f"Invalid schema id {schema_id}")
            held = self._identity.get(schema_id)
            if held is not None and held != wanted:
                raise RegistryError(
                    ID_DOES_NOT_MATCH, f"Overwrite new schema with id {schema_id} is not permitted."
                )
            new_id = schema_id
        else:
            known = [i for i, ident in self._identity.items() if ident == wanted]
            new_id = min(known) if known else self.max_id + 1
        if new_id > ID_MAX:
            raise RegistryError(STORE_ERROR, "schema ids are exhausted")
        every = self.versions_of(subject, deleted=True)
        if version is not None:
            if version == LATEST or version in every:
                raise RegistryError(
                    INVALID_VERSION, f"Version {version} of subject {subject} cannot be set"
                )
            new_version = version
        else:
            new_version = (every[-1] if every else 0) + 1
        records: list[Record] = [SchemaRecord(subject, new_version, new_id, text)]
        if new_id > self.max_id:
            records.append(MaxIdRecord(new_id))
        return Decision(tuple(records), {"id": new_id})

    def _resolve_reference_version(self, ref: Reference) -> int:
        if ref.version != LATEST:
            return ref.version
        vs = self.versions_of(ref.subject)
        if not vs:
            raise RegistryError(
                INVALID_SCHEMA,
                f"Invalid schema: reference {ref.name!r} to subject '{ref.subject}' not found",
            )
        return vs[-1]

    def _not_referenced_or_raise(self, subject: str, versions: Iterable[int]) -> None:
        for v in versions:
            if self.referenced_by(subject, v):
                raise RegistryError(
                    REFERENCE_EXISTS,
                    f"One or more references exist to the schema "
                    f"{{subject={subject},version={v}}}.",
                )

    def decide_delete_version(
        self, subject: str, version: int, permanent: bool = False
    ) -> Decision[int]:
        """``DELETE /subjects/{subject}/versions/{version}``: answers the version."""
        self._writable_or_raise(subject)
        every = self.versions_of(subject, deleted=True)
        if not every:
            raise subject_not_found(subject)
        if version == LATEST:
            live = self.versions_of(subject)
            v = live[-1] if live else every[-1]
        else:
            v = version
        entry = self.subjects[subject].get(v)
        if entry is None:
            raise RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")
        self._not_referenced_or_raise(subject, [v])
        if permanent:
            if not entry.deleted:
                raise RegistryError(
                    SCHEMAVERSION_NOT_SOFT_DELETED,
                    f"Subject '{subject}' Version {v} was not deleted first "
                    f"before being permanently deleted",
                )
            return Decision((SchemaTombstone(subject, v),), v)
        if entry.deleted:
            raise RegistryError(
                SCHEMAVERSION_SOFT_DELETED,
                f"Subject '{subject}' Version {v} was soft deleted. Set "
                f"permanent=true to delete permanently",
            )
        return Decision(
            (SchemaRecord(subject, v, entry.id, self.texts[entry.id], deleted=True),), v
        )

    def decide_delete_subject(self, subject: str, permanent: bool = False) -> Decision[list[int]]:
        """``DELETE /subjects/{subject}``: answers the versions deleted."""
        self._writable_or_raise(subject)
        every = self.versions_of(subject, deleted=True)
        if not every:
            raise subject_not_found(subject)
        live = self.versions_of(subject)
        self._not_referenced_or_raise(subject, live if not permanent else every)
        if permanent:
            if live:
                raise RegistryError(
                    SUBJECT_NOT_SOFT_DELETED,
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                )
            records: list[Record] = [SchemaTombstone(subject, v) for v in every]
            if subject in self.configs:
                records.append(ConfigRecord(subject, None))
            if subject in self.modes:
                records.append(ModeRecord(subject, None))
            return Decision(tuple(records), every)
        if not live:
            raise RegistryError(
                SUBJECT_SOFT_DELETED,
                f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently",
            )
        return Decision(
            tuple(
                SchemaRecord(
                    subject,
                    v,
                    self.subjects[subject][v].id,
                    self.texts[self.subjects[subject][v].id],
                    deleted=True,
                )
                for v in live
            ),
            live,
        )

    # ------------------------------------------------------------ configs and modes

    def get_config(self, subject: str | None, default_to_global: bool = False) -> dict[str, Any]:
        level = self._subject_or_global(
            self.configs,
            self.level(None),
            subject,
            default_to_global,
            SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
            "compatibility",
        )
        return {"compatibilityLevel": level}

    @staticmethod
    def _subject_or_global(
        per_subject: dict[str | None, str],
        global_value: str,
        subject: str | None,
        default_to_global: bool,
        code: int,
        what: str,
    ) -> str:
        """A subject's own setting; the global one for no subject, or for a subject without
        one when ``default_to_global`` (``?defaultToGlobal=true``), else the registry's
        'not configured' error."""
        if subject is None:
            return global_value
        value = per_subject.get(subject)
        if value is not None:
            return value
        if not default_to_global:
            raise RegistryError(
                code, f"Subject '{subject}' does not have subject-level {what} configured"
            )
        return global_value

    def decide_set_config(self, subject: str | None, level: Any) -> Decision[dict[str, Any]]:
        if subject is not None:
            check_subject(subject)
        lv = check_level(level)
        if self.configs.get(subject) == lv:
            return Decision((), {"compatibility": lv})
        return Decision((ConfigRecord(subject, lv),), {"compatibility": lv})

    def decide_delete_config(self, subject: str | None) -> Decision[dict[str, Any]]:
        if subject is not None and subject not in self.configs:
            if not self.versions_of(subject, deleted=True):
                raise subject_not_found(subject)
            raise RegistryError(
                SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        old = self.level(subject)
        records = (ConfigRecord(subject, None),) if subject in self.configs else ()
        return Decision(records, {"compatibilityLevel": old})

    def get_mode(self, subject: str | None, default_to_global: bool = False) -> dict[str, Any]:
        mode = self._subject_or_global(
            self.modes,
            self.mode(None),
            subject,
            default_to_global,
            SUBJECT_MODE_NOT_CONFIGURED,
            "mode",
        )
        return {"mode": mode}

    def decide_set_mode(
        self, subject: str | None, mode: Any, force: bool = False
    ) -> Decision[dict[str, Any]]:
        if subject is not None:
            check_subject(subject)
        m = check_mode(mode)
        if m == "IMPORT" and not force and self.modes.get(subject) != "IMPORT":
            has = self.versions_of(subject, deleted=True) if subject is not None else self.subjects
            if has:
                raise RegistryError(
                    OPERATION_NOT_PERMITTED, "Cannot import since found existing subjects"
                )
        if self.modes.get(subject) == m:
            return Decision((), {"mode": m})
        return Decision((ModeRecord(subject, m),), {"mode": m})

    def decide_delete_mode(self, subject: str) -> Decision[dict[str, Any]]:
        if subject not in self.modes:
            raise RegistryError(
                SUBJECT_MODE_NOT_CONFIGURED,
                f"Subject '{subject}' does not have subject-level mode configured",
            )
        return Decision((ModeRecord(subject, None),), {"mode": self.modes[subject]})


def _level_check(level: str, new: ParsedSchema, olds: list[ParsedSchema]) -> list[str]:
    """``new`` against ``olds`` (newest first) by the level's direction."""
    if level == "NONE":
        return []
    out: list[str] = []
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    for old in olds:
        if backward:
            out += [
                f"the new schema cannot read data written with an earlier one: {p}"
                for p in incompatibilities(new, old)
            ]
        if forward:
            out += [
                f"an earlier schema cannot read data written with the new one: {p}"
                for p in incompatibilities(old, new)
            ]
        if out:
            break
    return out


__all__ = ["RegistryError", "RegistryState", "Decision", "parse_version", "text_of"]
