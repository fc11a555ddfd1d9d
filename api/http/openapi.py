"""The OpenAPI 3.1 document of the broker's public HTTP API, served at ``/openapi.json``.

Built from one table (``OPERATIONS``) so that a route added to ``api.http.v3`` or
``api.http.v2`` needs one line here; ``tests/unit/http`` checks that every public route of a
broker app is in the document and every path of the document is routed.
"""

from __future__ import annotations

from typing import Any

from broker.schemas.state import LEVELS

ERROR = {"$ref": "#/components/schemas/Error"}

_TP = {
    "type": "object",
    "required": ["topic", "partition"],
    "properties": {"topic": {"type": "string"}, "partition": {"type": "integer", "minimum": 0}},
}

_DATA = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["JSON", "STRING", "BINARY", "AVRO", "JSONSCHEMA"]},
        "data": {},
        # The schema types (api.http.embedded): one of these names the schema.
        "schema_id": {"type": "integer", "minimum": 1},
        "schema_version": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "latest"}]},
        "schema": {"type": "string"},
        "subject": {"type": "string"},
    },
}

SV = "/subjects/{subject}/versions"

SCHEMAS: dict[str, Any] = {
    "RegistrySchema": {
        "type": "object",
        "required": ["schema"],
        "properties": {
            "schema": {"type": "string"},
            "schemaType": {"type": "string", "enum": ["AVRO", "JSON"]},
            "references": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "subject", "version"],
                    "properties": {
                        "name": {"type": "string"},
                        "subject": {"type": "string"},
                        "version": {"type": "integer"},
                    },
                },
            },
            "id": {"type": "integer"},
            "version": {"type": "integer"},
        },
    },
    "RegistryConfig": {
        "type": "object",
        "properties": {
            "compatibility": {
                "type": "string",
                "enum": list(LEVELS),
            }
        },
    },
    "RegistryMode": {
        "type": "object",
        "properties": {
            "mode": {
                "type": "string",
                "enum": ["READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT"],
            }
        },
    },
    "Error": {
        "type": "object",
        "required": ["error_code", "message"],
        "properties": {"error_code": {"type": "integer"}, "message": {"type": ["string", "null"]}},
    },
    "ProduceRecord": {
        "type": "object",
        "properties": {
            "partition_id": {"type": "integer", "minimum": 0},
            "key": _DATA,
            "value": _DATA,
            "headers": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "value": {"type": ["string", "null"], "format": "byte"},
                    },
                },
            },
            "timestamp": {
                "oneOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]
            },
        },
    },
    "ProduceReport": {
        "type": "object",
        "properties": {
            "error_code": {"type": "integer"},
            "message": {"type": "string"},
            "cluster_id": {"type": "string"},
            "topic_name": {"type": "string"},
            "partition_id": {"type": "integer"},
            "offset": {"type": "integer"},
            "timestamp": {"type": "string", "format": "date-time"},
        },
    },
    "CreateTopic": {
        "type": "object",
        "required": ["topic_name"],
        "properties": {
            "topic_name": {"type": "string"},
            "partitions_count": {"type": "integer", "minimum": 1},
            "replication_factor": {"type": "integer", "minimum": 1},
            "configs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                },
            },
            "validate_only": {"type": "boolean"},
            "replicas_assignments": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "integer"}},
            },
        },
    },
    "V2Produce": {
        "type": "object",
        "required": ["records"],
        "properties": {
            "records": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"key": {}, "value": {}, "partition": {"type": "integer"}},
                },
            }
        },
    },
    "V2CreateConsumer": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "format": {"type": "string", "enum": ["binary", "json", "string"]},
            "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest", "none"]},
            "auto.commit.enable": {"type": ["boolean", "string"]},
            "fetch.min.bytes": {"type": ["integer", "string"]},
            "consumer.request.timeout.ms": {"type": ["integer", "string"]},
        },
    },
    "V2Subscription": {
        "type": "object",
        "properties": {
            "topics": {"type": "array", "items": {"type": "string"}},
            "topic_pattern": {"type": "string"},
        },
    },
    "V2Partitions": {
        "type": "object",
        "required": ["partitions"],
        "properties": {"partitions": {"type": "array", "items": _TP}},
    },
    "V2Offsets": {
        "type": "object",
        "properties": {
            "offsets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": {"type": "string"},
                        "partition": {"type": "integer"},
                        "offset": {"type": "integer"},
                    },
                },
            },
            "timestamps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": {"type": "string"},
                        "partition": {"type": "integer"},
                        "timestamp": {
                            "oneOf": [
                                {"type": "string", "format": "date-time"},
                                {"type": "integer"},
                            ]
                        },
                    },
                },
            },
        },
    },
    "OffsetReset": {
        "type": "object",
        "required": ["to"],
        "properties": {
            "topics": {
                "type": "array",
                "items": {"type": "string", "description": "TOPIC or TOPIC:P,P"},
            },
            "all_topics": {"type": "boolean"},
            "to": {
                "type": "string",
                "enum": [
                    "earliest",
                    "latest",
                    "current",
                    "offset",
                    "datetime",
                    "shift-by",
                    "by-duration",
                    "offsets",
                ],
            },
            "value": {
                "description": "offset, shift-by: integer; datetime: ISO-8601 or epoch ms; "
                "by-duration: PnDTnHnMnS; offsets: [{topic, partition, offset}]"
            },
            "execute": {"type": "boolean", "default": False},
        },
    },
    "OffsetDelete": {
        "type": "object",
        "required": ["topics"],
        "properties": {
            "topics": {
                "type": "array",
                "items": {"type": "string", "description": "TOPIC or TOPIC:P,P"},
            }
        },
    },
}

C = "/v3/clusters/{cluster_id}"
T = C + "/topics/{topic}"
P = T + "/partitions/{partition}"
G = C + "/consumer-groups/{group}"
CI = "/consumers/{group}/instances/{instance}"

# (method, path, summary, query parameters, request body schema name or None, success status)
OPERATIONS: list[tuple[str, str, str, list[str], str | None, str]] = [
    ("get", "/v3/clusters", "List the cluster (one).", [], None, "200"),
    ("get", C, "The cluster: id, active controller, brokers.", [], None, "200"),
    ("get", C + "/brokers", "List brokers.", [], None, "200"),
    ("get", C + "/brokers/{broker_id}", "One broker.", [], None, "200"),
    ("get", C + "/topics", "List topics.", [], None, "200"),
    (
        "post",
        C + "/topics",
        "Create a topic (validate_only: check only).",
        [],
        "CreateTopic",
        "201",
    ),
    ("get", T, "One topic.", [], None, "200"),
    ("delete", T, "Delete a topic.", [], None, "204"),
    ("patch", T, 'Add partitions: {"partitions_count": N}.', [], None, "200"),
    ("get", T + "/configs", "List a topic's configs.", [], None, "200"),
    (
        "post",
        T + "/configs:alter",
        'Set/delete configs: {"data": [{name, value, operation}]}.',
        [],
        None,
        "204",
    ),
    ("get", T + "/configs/{name}", "One config.", [], None, "200"),
    ("put", T + "/configs/{name}", 'Set a config: {"value": ...}.', [], None, "204"),
    ("delete", T + "/configs/{name}", "Reset a config to its default.", [], None, "204"),
    ("get", T + "/partitions", "List partitions (leader, replicas, ISR).", [], None, "200"),
    ("get", P, "One partition.", [], None, "200"),
    (
        "get",
        P + "/offset",
        "Earliest and latest offsets; with timestamp, the offset for it.",
        ["timestamp"],
        None,
        "200",
    ),
    (
        "get",
        P + "/records",
        "Stateless read from an offset; long-polls at the end. Accept: "
        "application/json (default), application/msgpack (whole batches), "
        "application/vnd.apache.arrow.stream.",
        [
            "offset",
            "max_bytes",
            "timeout_ms",
            "format",
            "key_format",
            "max_offset",
            "include_headers",
            "isolation_level",
        ],
        None,
        "200",
    ),
    (
        "post",
        T + "/records",
        "Produce one record, several (array, concatenated or chunked "
        "stream: one report per record, in order), or a msgpack batch.",
        ["acks", "timeout_ms"],
        "ProduceRecord",
        "200",
    ),
    (
        "post",
        T + "/records:batch",
        'Produce {"entries": [{id, ...record}]}; 207 with successes and failures.',
        ["acks", "timeout_ms"],
        None,
        "207",
    ),
    ("get", "/topics", "v2: topic names.", [], None, "200"),
    ("get", "/topics/{topic}", "v2: one topic.", [], None, "200"),
    (
        "post",
        "/topics/{topic}",
        'v2: produce {"records": [...]} (json, binary, avro or jsonschema embedded format; '
        "the schema ones with value_schema/value_schema_id and key_schema/key_schema_id).",
        ["acks"],
        "V2Produce",
        "200",
    ),
    ("get", "/topics/{topic}/partitions", "v2: partitions.", [], None, "200"),
    ("get", "/topics/{topic}/partitions/{partition}", "v2: one partition.", [], None, "200"),
    (
        "post",
        "/topics/{topic}/partitions/{partition}",
        "v2: produce to one partition.",
        ["acks"],
        "V2Produce",
        "200",
    ),
    (
        "get",
        "/topics/{topic}/partitions/{partition}/offsets",
        "v2: beginning and end offsets.",
        [],
        None,
        "200",
    ),
    ("get", "/brokers", "v2: broker ids.", [], None, "200"),
    ("get", C + "/consumer-groups", "List consumer groups.", [], None, "200"),
    ("get", G, "One consumer group: state, assignor, coordinator.", [], None, "200"),
    ("get", G + "/consumers", "The group's members.", [], None, "200"),
    ("get", G + "/consumers/{consumer}", "One member.", [], None, "200"),
    ("get", G + "/consumers/{consumer}/assignments", "A member's partitions.", [], None, "200"),
    (
        "get",
        G + "/lags",
        "Lag per partition (committed offset, log end offset, member).",
        [],
        None,
        "200",
    ),
    ("get", G + "/lags/{topic}/partitions/{partition}", "One partition's lag.", [], None, "200"),
    ("get", G + "/lag-summary", "Maximum and total lag.", [], None, "200"),
    (
        "post",
        G + "/offsets:reset",
        "Plan (execute: true applies) a reset of an empty group's offsets, as "
        "kafka-consumer-groups --reset-offsets.",
        [],
        "OffsetReset",
        "200",
    ),
    (
        "post",
        G + "/offsets:delete",
        "Delete the group's committed offsets of some topics (OffsetDelete, KIP-496).",
        [],
        "OffsetDelete",
        "200",
    ),
    (
        "post",
        "/consumers/{group}",
        "v2: create a consumer instance; answers instance_id and base_uri (this broker).",
        [],
        "V2CreateConsumer",
        "200",
    ),
    ("delete", CI, "v2: delete a consumer instance (it leaves its group).", [], None, "204"),
    (
        "post",
        CI + "/subscription",
        "v2: subscribe to topics or a topic_pattern.",
        [],
        "V2Subscription",
        "204",
    ),
    ("get", CI + "/subscription", "v2: the subscribed topics.", [], None, "200"),
    ("delete", CI + "/subscription", "v2: unsubscribe (leave the group).", [], None, "204"),
    ("post", CI + "/assignments", "v2: assign partitions manually.", [], "V2Partitions", "204"),
    ("get", CI + "/assignments", "v2: the assigned partitions.", [], None, "200"),
    ("post", CI + "/positions", "v2: seek to offsets or timestamps.", [], "V2Offsets", "204"),
    ("post", CI + "/positions/beginning", "v2: seek to the beginning.", [], "V2Partitions", "204"),
    ("post", CI + "/positions/end", "v2: seek to the end.", [], "V2Partitions", "204"),
    (
        "get",
        CI + "/records",
        "v2: records (Accept: application/vnd.kafka.<format>.v2+json); "
        "waits up to timeout ms for data.",
        ["timeout", "max_bytes"],
        None,
        "200",
    ),
    (
        "post",
        CI + "/offsets",
        "v2: commit the named offsets (+1), or everything consumed.",
        [],
        "V2Offsets",
        "200",
    ),
    (
        "get",
        CI + "/offsets",
        "v2: committed offsets of the named partitions (JSON body) or of the assignment.",
        [],
        "V2Partitions",
        "200",
    ),
    ("get", "/metrics", "Prometheus text format.", [], None, "200"),
    ("get", "/openapi.json", "This document.", [], None, "200"),
    ("get", "/openapi", "This document rendered as a page (HTML, no CDN).", [], None, "200"),
    ("get", "/v3/health", "Liveness.", [], None, "200"),
    (
        "get",
        "/v3/health/ready",
        "Readiness: registered, unfenced, caught up with metadata.",
        [],
        None,
        "200",
    ),
    # The Schema Registry (Confluent's v1 API, api.http.schemas; docs/schemas.md).
    ("get", "/subjects", "Registry: subjects.", ["subjectPrefix", "deleted"], None, "200"),
    ("get", SV, "Registry: a subject's versions.", ["deleted"], None, "200"),
    (
        "post",
        SV,
        "Registry: register a schema; answers its id.",
        ["normalize"],
        "RegistrySchema",
        "200",
    ),
    (
        "get",
        SV + "/{version}",
        "Registry: one version (a number, latest or -1).",
        ["deleted"],
        None,
        "200",
    ),
    (
        "delete",
        SV + "/{version}",
        "Registry: soft-delete a version (permanent=true: remove).",
        ["permanent"],
        None,
        "200",
    ),
    (
        "get",
        SV + "/{version}/schema",
        "Registry: a version's schema text.",
        ["deleted"],
        None,
        "200",
    ),
    (
        "get",
        SV + "/{version}/referencedby",
        "Registry: ids of schemas referencing it.",
        [],
        None,
        "200",
    ),
    (
        "post",
        "/subjects/{subject}",
        "Registry: the version holding a schema.",
        ["normalize", "deleted"],
        "RegistrySchema",
        "200",
    ),
    (
        "delete",
        "/subjects/{subject}",
        "Registry: soft-delete a subject (permanent=true: remove).",
        ["permanent"],
        None,
        "200",
    ),
    (
        "get",
        "/schemas",
        "Registry: schemas of live versions.",
        ["subjectPrefix", "deleted", "latestOnly"],
        None,
        "200",
    ),
    ("get", "/schemas/types", "Registry: the schema types offered.", [], None, "200"),
    ("get", "/schemas/ids/{id}", "Registry: a schema by id.", [], None, "200"),
    ("get", "/schemas/ids/{id}/schema", "Registry: a schema's text by id.", [], None, "200"),
    (
        "get",
        "/schemas/ids/{id}/versions",
        "Registry: subject-versions holding an id.",
        ["deleted"],
        None,
        "200",
    ),
    (
        "get",
        "/schemas/ids/{id}/subjects",
        "Registry: subjects holding an id.",
        ["deleted"],
        None,
        "200",
    ),
    (
        "post",
        "/compatibility" + SV + "/{version}",
        "Registry: is a schema compatible with one version.",
        ["verbose", "normalize"],
        "RegistrySchema",
        "200",
    ),
    (
        "post",
        "/compatibility" + SV,
        "Registry: is a schema compatible with the versions its level names.",
        ["verbose", "normalize"],
        "RegistrySchema",
        "200",
    ),
    *[
        (m, path, f"Registry: {what}.", q, body, "200")
        for path in ("/config", "/config/{subject}")
        for m, what, q, body in (
            ("get", "compatibility level", ["defaultToGlobal"], None),
            ("put", "set the compatibility level", [], "RegistryConfig"),
            ("delete", "remove the compatibility level", [], None),
        )
    ],
    ("get", "/mode", "Registry: mode.", [], None, "200"),
    ("put", "/mode", "Registry: set the mode.", ["force"], "RegistryMode", "200"),
    ("get", "/mode/{subject}", "Registry: a subject's mode.", ["defaultToGlobal"], None, "200"),
    ("put", "/mode/{subject}", "Registry: set a subject's mode.", ["force"], "RegistryMode", "200"),
    ("delete", "/mode/{subject}", "Registry: remove a subject's mode.", [], None, "200"),
    # Broker configs, read-only (api.http.broker_configs).
    ("get", C + "/broker-configs", "Cluster-wide broker config defaults.", [], None, "200"),
    ("get", C + "/broker-configs/{name}", "One cluster-wide broker config.", [], None, "200"),
    ("get", C + "/brokers/{broker_id}/configs", "A broker's configs.", [], None, "200"),
    ("get", C + "/brokers/{broker_id}/configs/{name}", "One broker config.", [], None, "200"),
]

# ACLs (the REST Proxy's v3 shape) and SCRAM users (Longboat's own): api.http.acls, issue 18.
_ACL_QUERY = [
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission",
]
_ACL = {
    "type": "object",
    "required": [
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "operation",
        "permission",
    ],
    "properties": {
        "resource_type": {
            "type": "string",
            "enum": ["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"],
        },
        "resource_name": {"type": "string"},
        "pattern_type": {"type": "string", "enum": ["LITERAL", "PREFIXED"]},
        "principal": {"type": "string", "description": "User:<name>, or User:* for everyone"},
        "host": {"type": "string", "description": "* (default) for every host"},
        "operation": {
            "type": "string",
            "enum": [
                "ALL",
                "READ",
                "WRITE",
                "CREATE",
                "DELETE",
                "ALTER",
                "DESCRIBE",
                "CLUSTER_ACTION",
                "DESCRIBE_CONFIGS",
                "ALTER_CONFIGS",
                "IDEMPOTENT_WRITE",
            ],
        },
        "permission": {"type": "string", "enum": ["ALLOW", "DENY"]},
    },
}
SCHEMAS.update(
    {
        "Acl": _ACL,
        "AclBatch": {
            "type": "object",
            "required": ["data"],
            "properties": {
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/Acl"}}
            },
        },
        "ScramUser": {
            "type": "object",
            "required": ["user_name", "password"],
            "properties": {
                "user_name": {"type": "string"},
                "password": {"type": "string", "description": "salted on the broker; never stored"},
                "mechanism": {"type": "string", "enum": ["SCRAM-SHA-256", "SCRAM-SHA-512"]},
                "iterations": {"type": "integer", "minimum": 4096, "maximum": 16384},
            },
        },
    }
)
OPERATIONS.extend(
    [
        ("get", C + "/acls", "Search ACLs (absent or ANY: any value).", _ACL_QUERY, None, "200"),
        ("post", C + "/acls", "Create one ACL.", [], "Acl", "201"),
        ("post", C + "/acls:batch", "Create ACLs, all or nothing.", [], "AclBatch", "201"),
        (
            "delete",
            C + "/acls",
            "Delete the ACLs a filter matches (resource_type, pattern_type, operation and "
            "permission required; ANY is a value); answers them.",
            _ACL_QUERY,
            None,
            "200",
        ),
        (
            "get",
            C + "/users",
            "Users with SCRAM credentials (mechanisms, iterations).",
            [],
            None,
            "200",
        ),
        (
            "post",
            C + "/users",
            "Set a user's SCRAM credential from a password.",
            [],
            "ScramUser",
            "200",
        ),
        ("get", C + "/users/{user}", "One user's SCRAM credentials.", [], None, "200"),
        (
            "delete",
            C + "/users/{user}",
            "Remove a user's SCRAM credential (one mechanism, or all).",
            ["mechanism"],
            None,
            "204",
        ),
    ]
)

# Replica placement and leadership (api.http.reassign): KIP-455 reassignments, ElectLeaders,
# DeleteRecords.
_BROKER_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
SCHEMAS.update(
    {
        "Reassignment": {
            "type": "object",
            "required": ["replicas"],
            "properties": {"replicas": _BROKER_IDS},
        },
        "ReassignmentPlan": {
            "type": "object",
            "required": ["partitions"],
            "properties": {
                "version": {"type": "integer"},
                "partitions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["topic", "partition"],
                        "properties": {
                            "topic": {"type": "string"},
                            "partition": {"type": "integer", "minimum": 0},
                            "replicas": {"oneOf": [_BROKER_IDS, {"type": "null"}]},
                        },
                    },
                },
            },
        },
        "Election": {
            "type": "object",
            "properties": {
                "election_type": {"type": "string", "enum": ["PREFERRED", "UNCLEAN"]},
                "partitions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "topic_name": {"type": "string"},
                            "partition_id": {"type": "integer", "minimum": 0},
                        },
                    },
                },
            },
        },
        "Throttle": {
            "type": "object",
            "required": ["rate_bytes_per_s"],
            "properties": {"rate_bytes_per_s": {"type": "integer", "minimum": 1}},
        },
        "DeleteRecords": {
            "type": "object",
            "required": ["offset"],
            "properties": {"offset": {"type": "integer", "minimum": -1}},
        },
    }
)
_ALL = C + "/topics/-/partitions/-/reassignment"
OPERATIONS += [
    ("get", _ALL, "Reassignments in progress (KIP-455).", [], None, "200"),
    ("post", _ALL, "Start or cancel several reassignments.", [], "ReassignmentPlan", "200"),
    (
        "get",
        T + "/partitions/-/reassignment",
        "A topic's reassignments in progress.",
        [],
        None,
        "200",
    ),
    ("get", P + "/reassignment", "A partition's reassignment in progress.", [], None, "200"),
    ("patch", P + "/reassignment", "Move a partition's replicas.", [], "Reassignment", "200"),
    ("delete", P + "/reassignment", "Cancel a partition's reassignment.", [], None, "204"),
    ("get", C + "/reassignment-throttle", "The reassignment throttle.", [], None, "200"),
    ("put", C + "/reassignment-throttle", "Set it (bytes/s).", [], "Throttle", "200"),
    ("delete", C + "/reassignment-throttle", "Remove it.", [], None, "204"),
    ("post", C + "/elections", "Elect leaders (preferred or unclean).", [], "Election", "200"),
    (
        "post",
        P + "/records:delete",
        "Delete records before an offset (DeleteRecords).",
        ["timeout_ms"],
        "DeleteRecords",
        "200",
    ),
]

# Issue 19: transactional produce (api.http.transactions).
SCHEMAS["TransactionalProduce"] = {
    "type": "object",
    "required": ["records"],
    "properties": {
        "transactional_id": {"type": "string", "minLength": 1, "maxLength": 249},
        "request_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "transaction_timeout_ms": {"type": "integer", "minimum": 1000, "maximum": 900000},
        "records": {
            "type": "array",
            "minItems": 1,
            "maxItems": 10000,
            "items": {
                "allOf": [
                    {"$ref": "#/components/schemas/ProduceRecord"},
                    {
                        "type": "object",
                        "required": ["topic"],
                        "properties": {"topic": {"type": "string"}},
                    },
                ]
            },
        },
    },
}
OPERATIONS += [
    (
        "post",
        C + "/transactions",
        "Produce records to several topics and partitions in one transaction: all "
        "visible at read_committed or none; a request_id makes retries idempotent.",
        [],
        "TransactionalProduce",
        "200",
    ),
]

_INT_PARAMS = {"timeout_ms", "max_bytes", "max_offset", "timeout"}


def _path_params(path: str) -> list[dict[str, Any]]:
    out = []
    for part in path.split("/"):
        if part.startswith("{"):
            name = part[1 : part.index("}")]
            typ = "integer" if name in ("partition", "broker_id") else "string"
            out.append(
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "schema": {"type": typ, **({"minimum": 0} if typ == "integer" else {})},
                }
            )
    return out


# ------------------------------------------------------------------ responses
# Every operation's success answer has a schema: the resources below where the shape is
# Longboat's own or the REST Proxy's and fixed; otherwise the v3 envelope (a list or one
# resource of some ``kind``), or a JSON object. Binary and streamed content types are
# listed per operation in ``CONTENT_TYPES``.

_LINK = {"type": "object", "properties": {"related": {"type": "string"}}}
_META = {
    "type": "object",
    "properties": {
        "self": {"type": "string"},
        "resource_name": {"type": "string"},
        "next": {"type": ["string", "null"]},
    },
}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_INTS = {"type": "array", "items": _INT}


def _resource(kind: str, props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"kind": {"const": kind}, "metadata": _META, **props},
    }


def _list_of(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "kind": _STR,
            "metadata": _META,
            "data": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
        },
    }


RESPONSE_SCHEMAS: dict[str, Any] = {
    "KafkaBroker": _resource(
        "KafkaBroker",
        {
            "cluster_id": _STR,
            "broker_id": _INT,
            "host": {"type": ["string", "null"]},
            "port": {"type": ["integer", "null"]},
            "rack": {"type": ["string", "null"]},
            "fenced": {"type": "boolean"},
            "in_controlled_shutdown": {"type": "boolean"},
            "broker_epoch": _INT,
        },
    ),
    "KafkaTopic": _resource(
        "KafkaTopic",
        {
            "cluster_id": _STR,
            "topic_name": _STR,
            "topic_id": _STR,
            "is_internal": {"type": "boolean"},
            "replication_factor": _INT,
            "partitions_count": _INT,
            "partitions": _LINK,
            "configs": _LINK,
        },
    ),
    "KafkaPartition": _resource(
        "KafkaPartition",
        {
            "cluster_id": _STR,
            "topic_name": _STR,
            "partition_id": _INT,
            "leader": {"oneOf": [_LINK, {"type": "null"}]},
            "leader_id": _INT,
            "leader_epoch": _INT,
            "replicas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "broker_id": _INT,
                        "is_leader": {"type": "boolean"},
                        "in_sync": {"type": "boolean"},
                    },
                },
            },
            "isr": _INTS,
            "eligible_leader_replicas": _INTS,
            "last_known_elr": _INTS,
        },
    ),
    "KafkaTopicConfig": _resource(
        "KafkaTopicConfig",
        {
            "cluster_id": _STR,
            "topic_name": _STR,
            "name": _STR,
            "value": {"type": ["string", "null"]},
            "is_default": {"type": "boolean"},
            "is_read_only": {"type": "boolean"},
            "is_sensitive": {"type": "boolean"},
            "source": _STR,
            "synonyms": {"type": "array", "items": {"type": "object"}},
        },
    ),
    "KafkaCluster": _resource(
        "KafkaCluster",
        {
            "cluster_id": _STR,
            "controller": {"type": "object"},
            "metadata_offset": _INT,
            "brokers": {"type": "array", "items": {"$ref": "#/components/schemas/KafkaBroker"}},
        },
    ),
    "PartitionOffsets": {
        "type": "object",
        "properties": {
            "cluster_id": _STR,
            "topic_name": _STR,
            "partition_id": _INT,
            "earliest_offset": _INT,
            "latest_offset": _INT,
            "timestamp": _INT,
            "offset": {"type": ["integer", "null"]},
        },
    },
    "RecordsRead": {
        "type": "object",
        "properties": {
            "cluster_id": _STR,
            "topic_name": _STR,
            "partition_id": _INT,
            "records": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "offset": _INT,
                        "timestamp": _INT,
                        "key": {},
                        "value": {},
                        "headers": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"name": _STR, "value": {"type": ["string", "null"]}},
                            },
                        },
                        "partition_id": _INT,
                    },
                },
            },
            "next_offset": _INT,
            "high_watermark": _INT,
            "log_start_offset": _INT,
        },
    },
    "OffsetResetResult": {
        "type": "object",
        "properties": {
            "kind": {"const": "KafkaConsumerGroupOffsetReset"},
            "group": _STR,
            "executed": {"type": "boolean"},
            "partitions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": _STR,
                        "partition": _INT,
                        "current_offset": {"type": ["integer", "null"]},
                        "new_offset": _INT,
                        "earliest": _INT,
                        "latest": _INT,
                        "clamped": {"type": "boolean"},
                    },
                },
            },
        },
    },
    "OffsetDeleteResult": {
        "type": "object",
        "properties": {
            "kind": {"const": "KafkaConsumerGroupOffsetDelete"},
            "group": _STR,
            "partitions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "topic": _STR,
                        "partition": _INT,
                        "had_offset": {"type": "boolean"},
                    },
                },
            },
        },
    },
    "V3Resource": {
        "type": "object",
        "description": "One v3 resource: its kind, metadata, and fields.",
        "properties": {"kind": _STR, "metadata": _META},
    },
    "V3List": {
        "type": "object",
        "description": "A v3 list: kind, metadata, and data (resources).",
        "properties": {
            "kind": _STR,
            "metadata": _META,
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/V3Resource"}},
        },
    },
    "KafkaBrokerList": _list_of("KafkaBroker"),
    "KafkaTopicList": _list_of("KafkaTopic"),
    "KafkaPartitionList": _list_of("KafkaPartition"),
    "KafkaTopicConfigList": _list_of("KafkaTopicConfig"),
    "KafkaClusterList": _list_of("KafkaCluster"),
    # Broker configs, read-only (api.http.broker_configs).
    **{
        kind: _resource(
            kind,
            {
                "cluster_id": _STR,
                **extra,
                "name": _STR,
                "value": {"type": ["string", "null"], "description": "null when sensitive"},
                "is_default": {"type": "boolean"},
                "is_read_only": {"type": "boolean"},
                "is_sensitive": {"type": "boolean"},
                "source": {"enum": ["STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"]},
                "synonyms": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": _STR,
                            "value": {"type": ["string", "null"]},
                            "source": _STR,
                        },
                    },
                },
            },
        )
        for kind, extra in (
            ("KafkaBrokerConfig", {"broker_id": _INT}),
            ("KafkaClusterConfig", {"config_type": {"const": "BROKER"}}),
        )
    },
    "KafkaBrokerConfigList": _list_of("KafkaBrokerConfig"),
    "KafkaClusterConfigList": _list_of("KafkaClusterConfig"),
}

_R = "#/components/schemas/"
RESPONSES: dict[tuple[str, str], str] = {
    ("get", "/v3/clusters"): "KafkaClusterList",
    ("get", C): "KafkaCluster",
    ("get", C + "/brokers"): "KafkaBrokerList",
    ("get", C + "/brokers/{broker_id}"): "KafkaBroker",
    ("get", C + "/topics"): "KafkaTopicList",
    ("post", C + "/topics"): "KafkaTopic",
    ("get", T): "KafkaTopic",
    ("patch", T): "KafkaTopic",
    ("get", T + "/configs"): "KafkaTopicConfigList",
    ("get", T + "/configs/{name}"): "KafkaTopicConfig",
    ("get", T + "/partitions"): "KafkaPartitionList",
    ("get", P): "KafkaPartition",
    ("get", P + "/offset"): "PartitionOffsets",
    ("get", P + "/records"): "RecordsRead",
    ("post", T + "/records"): "ProduceReport",
    ("post", G + "/offsets:reset"): "OffsetResetResult",
    ("post", G + "/offsets:delete"): "OffsetDeleteResult",
    ("get", C + "/broker-configs"): "KafkaClusterConfigList",
    ("get", C + "/broker-configs/{name}"): "KafkaClusterConfig",
    ("get", C + "/brokers/{broker_id}/configs"): "KafkaBrokerConfigList",
    ("get", C + "/brokers/{broker_id}/configs/{name}"): "KafkaBrokerConfig",
}
"""Operations whose success answer has a schema of its own; the others get `_default_response`."""

_BINARY = {"type": "string", "format": "binary"}
CONTENT_TYPES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("post", T + "/records"): {
        "request": {
            # One record per line (a chunked stream: reports as they land).
            "application/x-ndjson": {"schema": {"$ref": _R + "ProduceRecord"}},
            "application/msgpack": {"schema": {**_BINARY, "description": "The binary batch form."}},
        },
        "response": {
            "application/x-ndjson": {"schema": {"$ref": _R + "ProduceReport"}},
            "application/msgpack": {"schema": _BINARY},
        },
    },
    ("get", P + "/records"): {
        "response": {
            "application/msgpack": {"schema": {**_BINARY, "description": "Whole record batches."}},
            "application/vnd.apache.arrow.stream": {
                "schema": {**_BINARY, "description": "An Arrow IPC stream, one row per record."}
            },
        },
    },
    ("get", "/metrics"): {"response": {"text/plain": {"schema": _STR}}},
    ("get", "/openapi"): {"response": {"text/html": {"schema": _STR}}},
}
"""Content types beyond application/json: request bodies and answers."""


def _default_response(path: str) -> dict[str, Any]:
    if path.startswith("/v3/clusters"):
        last = path.rstrip("/").rsplit("/", 1)[-1]
        return {"$ref": _R + ("V3Resource" if last.startswith("{") else "V3List")}
    return {"type": ["object", "array"]}


def _success(method: str, path: str, status: str) -> dict[str, Any]:
    if status == "204":
        return {"description": "No content."}
    name = RESPONSES.get((method, path))
    schema = {"$ref": _R + name} if name else _default_response(path)
    content: dict[str, Any] = {}
    extra = CONTENT_TYPES.get((method, path), {}).get("response", {})
    if (method, path) not in (("get", "/metrics"), ("get", "/openapi")):
        content["application/json"] = {"schema": schema}
    content.update(extra)
    return {"description": "OK", "content": content}


def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, query, body, ok in OPERATIONS:
        op: dict[str, Any] = {
            "summary": summary,
            "parameters": _path_params(path)
            + [
                {
                    "name": q,
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer" if q in _INT_PARAMS else "string"},
                }
                for q in query
            ],
            "responses": {
                ok: _success(method, path, ok),
                "default": {
                    "description": "Error",
                    "content": {"application/json": {"schema": ERROR}},
                },
            },
        }
        if body is not None:
            op["requestBody"] = {
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}
                }
            }
        extra = CONTENT_TYPES.get((method, path), {}).get("request")
        if extra:
            op.setdefault("requestBody", {"content": {}})["content"].update(extra)
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Longboat HTTP API",
            "version": "1",
            "description": "Shaped after the Confluent REST Proxy v3 and v2. Errors are "
            '{"error_code", "message"} with the matching status.',
        },
        "paths": paths,
        "components": {"schemas": {**SCHEMAS, **RESPONSE_SCHEMAS}},
    }
