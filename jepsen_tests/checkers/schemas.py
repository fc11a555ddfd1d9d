"""The schemas workload's checker: registrations acknowledged are kept, with their ids.

From a history of `jepsen_tests.workloads.schemas` ops (schemas named by their key, see
`schema_key`), the anomalies it reports (each makes the run invalid):

* ``lost-registration``: a registration answered ok whose (schema, id) is not among the
  subject's versions in the final read;
* ``id-reused``: one id seen (answered by a registration, or read by id or by version) for
  two different schemas;
* ``id-changed``: the same schema under the same subject answered or read with two ids;
* ``wrong-schema-read``: a read by id returned a schema other than the one a registration
  answered that id for (also counted in ``id-reused``; kept apart to say which read);
* ``versions-not-dense``: a subject's final versions are not 1, 2, ..., n, or a read of
  version v answered another version number;
* ``duplicate-version``: one schema under two versions of a subject (registering it again
  must answer the existing id and add no version);
* ``phantom-version``: a final version holding a schema no one asked to register there.

Counted, not anomalies: a read by id that found nothing (``id-not-found``: the broker asked
may not have read ``_schemas`` that far yet; a registration acknowledged through another broker
is not promised visible everywhere at once), subjects without a final read
(``unread-subjects``: the verdict is then "unknown" for their registrations).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from jepsen_tests.history import READ_SCHEMA_ID as READ_ID
from jepsen_tests.history import READ_SUBJECT, History
from jepsen_tests.history import READ_SUBJECT_VERSION as READ_VERSION
from jepsen_tests.history import REGISTER_SCHEMA as REGISTER

ANOMALIES = (
    "lost-registration",
    "id-reused",
    "id-changed",
    "wrong-schema-read",
    "versions-not-dense",
    "duplicate-version",
    "phantom-version",
)
_FIRST = 10  # offending ops kept per anomaly


def check(history: History) -> dict[str, Any]:
    anomalies: dict[str, list[Any]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    id_schemas: dict[int, set[str]] = defaultdict(set)
    subject_schema_ids: dict[tuple[str, str], set[int]] = defaultdict(set)
    acked: list[tuple[str, str, int, int]] = []  # subject, schema, id, op index
    attempted: set[tuple[str, str]] = set()
    answered_for: dict[int, str] = {}  # id -> schema a registration answered it for
    final: dict[str, list[dict[str, Any]]] = {}

    pairs = history.pairs()
    for p in pairs:
        counts[f"{p.f}-{p.type}"] += 1
        inv = p.invoke.value or {}
        if p.f == REGISTER:
            attempted.add((inv["subject"], inv["schema"]))
        if p.type != "ok" or p.complete is None:
            continue
        v = p.complete.value or {}
        if p.f == REGISTER:
            s, k, i = v["subject"], v["schema"], int(v["id"])
            acked.append((s, k, i, p.complete.index))
            id_schemas[i].add(k)
            subject_schema_ids[(s, k)].add(i)
            answered_for.setdefault(i, k)
        elif p.f == READ_VERSION and v.get("found"):
            s, i, k = v["subject"], int(v["id"]), v["schema"]
            id_schemas[i].add(k)
            subject_schema_ids[(s, k)].add(i)
            asked = str(v["version"])
            if asked.isdigit() and int(asked) != int(v["version_got"]):
                anomalies["versions-not-dense"].append(
                    {"op": p.complete.index, "asked": asked, "got": v["version_got"]}
                )
        elif p.f == READ_SUBJECT:
            final[v["subject"]] = list(v["versions"])
            for e in v["versions"]:
                id_schemas[int(e["id"])].add(e["schema"])
                subject_schema_ids[(v["subject"], e["schema"])].add(int(e["id"]))

    # Reads by id, against what registrations answered (all of them, whenever answered: an id
    # is never given to two schemas, so the order does not matter).
    for p in pairs:
        if p.f != READ_ID or p.type != "ok" or p.complete is None:
            continue
        v = p.complete.value or {}
        i, k = int(v["id"]), v.get("schema")
        if k is None:
            counts["id-not-found"] += 1
            continue
        id_schemas[i].add(k)
        if i in answered_for and answered_for[i] != k:
            anomalies["wrong-schema-read"].append(
                {"op": p.complete.index, "id": i, "read": k, "registered": answered_for[i]}
            )

    for i, ks in sorted(id_schemas.items()):
        if len(ks) > 1:
            anomalies["id-reused"].append({"id": i, "schemas": sorted(ks)})
    for (s, k), ids in sorted(subject_schema_ids.items()):
        if len(ids) > 1:
            anomalies["id-changed"].append({"subject": s, "schema": k, "ids": sorted(ids)})

    for s, versions in sorted(final.items()):
        nums = [int(e["version"]) for e in versions]
        if nums != list(range(1, len(nums) + 1)):
            anomalies["versions-not-dense"].append({"subject": s, "versions": nums})
        seen: dict[str, int] = {}
        for e in versions:
            if e["schema"] in seen:
                anomalies["duplicate-version"].append(
                    {
                        "subject": s,
                        "schema": e["schema"],
                        "versions": [seen[e["schema"]], e["version"]],
                    }
                )
            seen.setdefault(e["schema"], int(e["version"]))
            if (s, e["schema"]) not in attempted:
                anomalies["phantom-version"].append({"subject": s, **e})

    unread = sorted({s for s, _, _, _ in acked} - set(final))
    if unread:
        counts["unread-subjects"] = len(unread)
    for s, k, i, idx in acked:
        if s not in final:
            continue
        if not any(e["schema"] == k and int(e["id"]) == i for e in final[s]):
            anomalies["lost-registration"].append({"op": idx, "subject": s, "schema": k, "id": i})

    for a in ANOMALIES:
        if anomalies.get(a):
            counts[a] = len(anomalies[a])
    found = sorted(a for a in ANOMALIES if anomalies.get(a))
    valid: bool | str = False if found else ("unknown" if unread else True)
    return {
        "valid": valid,
        "counts": dict(sorted(counts.items())),
        "anomaly_types": found,
        "anomalies": {a: anomalies[a][:_FIRST] for a in found},
        "acknowledged_registrations": len(acked),
        "unread_subjects": unread,
    }
