"""Authorization on every route (issue 18): Kafka's ACL rules, one table entry per route.

``authz_middleware`` runs after authentication (``api.http.auth``) when the node's authorizer
is on. It finds the request's route in ``RULES`` by method and path pattern and asks
``metalog.security.authorize`` whether the principal may do the route's operation on the
resource it names (from the path, the msgpack body of a binary route, or the JSON body):

* node routes (``/internal/*``: Raft, controller commands, replica fetch, forwarding) need
  CLUSTER_ACTION on the CLUSTER, checked for the node that connected; a request a broker
  forwards for a user (``Longboat-Principal``) is also checked as that user, by the rule of
  its public twin (``/binary/v1/*``);
* produce WRITE, fetch READ, offsets and partitions DESCRIBE on the TOPIC; topic create CREATE
  on the CLUSTER or the TOPIC, delete DELETE, configs DESCRIBE_CONFIGS/ALTER_CONFIGS;
* group membership, commits and v2 consumer instances READ on the GROUP, group descriptions
  and lags DESCRIBE, group deletion DELETE; listing groups DESCRIBE on the CLUSTER;
* idempotent producer ids IDEMPOTENT_WRITE on the CLUSTER, or WRITE on some topic (KIP-679);
  transactions WRITE (DESCRIBE to find or describe) on the TRANSACTIONAL_ID, transactional
  offset commits READ on the GROUP (the topics a transaction adds are checked when it
  produces to them);
* cluster and broker descriptions, and the client's metadata, need only authentication (as
  Kafka's Metadata and DescribeCluster): their topic lists are filtered to the topics the
  principal may DESCRIBE, and the v3 and v2 topic lists likewise;
* metrics and the quorum's status DESCRIBE on the CLUSTER; listing ACLs and users DESCRIBE on
  the CLUSTER, changing them ALTER on the CLUSTER (as Kafka);
* the web console's pages need authentication, its data DESCRIBE on the CLUSTER;
* the Schema Registry: a subject's reads DESCRIBE and its writes WRITE on the topic it names
  under the default TopicNameStrategy (``orders-value`` -> ``orders``); lists and reads by id
  need authentication; global config and mode writes ALTER_CONFIGS on the CLUSTER.

A known principal without the right gets 403 ``{"error_code": 40301}``. Without DESCRIBE on a
topic it gets exactly what a missing topic gets (404 40401 over HTTP,
UNKNOWN_TOPIC_OR_PARTITION on a binary route), so it cannot learn the topic exists. A route
with no entry is refused (fail closed); the route-matrix test checks every route has one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgpack
import orjson
from aiohttp import web

from api.http.auth import PRINCIPAL, VIA, AclSource
from api.http.errors import JSON, HttpError, topic_not_found
from common.principal import CURRENT_PRINCIPAL
from metalog.security import (
    CLUSTER_NAME,
    AclBinding,
    Operation,
    Permission,
    ResourceType,
    authorize,
)

log = logging.getLogger(__name__)

Name = Callable[[web.Request], Awaitable[str | None]]


def _path(key: str) -> Name:
    async def name(request: web.Request) -> str | None:
        return request.match_info.get(key)

    return name


def _msgpack(key: str) -> Name:
    async def name(request: web.Request) -> str | None:
        try:
            body = msgpack.unpackb(await request.read(), raw=False)
        except Exception:  # the route refuses a bad body itself, with its own message
            return None
        v = body.get(key) if isinstance(body, dict) else None
        return v if isinstance(v, str) else None

    return name


def _json(key: str) -> Name:
    async def name(request: web.Request) -> str | None:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return None
        v = body.get(key) if isinstance(body, dict) else None
        return v if isinstance(v, str) else None

    return name


def _subject_topic(request: web.Request) -> Awaitable[str | None]:
    async def name() -> str | None:
        subject = request.match_info.get("subject")
        if subject is None:
            return None
        for suffix in ("-value", "-key"):
            if subject.endswith(suffix):
                return subject[: -len(suffix)]
        return subject

    return name()


async def _cluster(request: web.Request) -> str | None:
    return CLUSTER_NAME


@dataclass(frozen=True)
class Rule:
    operation: Operation | None
    """None: any authenticated principal."""
    resource_type: ResourceType = ResourceType.CLUSTER
    name: Name = _cluster
    binary: bool = False
    """A msgpack route: refusals in its error-map shape."""
    also_cluster: bool = False
    """Allowed too with the operation on the CLUSTER (topic creation)."""


AUTHENTICATED = Rule(None)
NODE = Rule(Operation.CLUSTER_ACTION)
CLUSTER_DESCRIBE = Rule(Operation.DESCRIBE)
T, G, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID


def _topic(op: Operation, key: str = "topic") -> Rule:
    return Rule(op, T, _path(key))


def _bin(op: Operation, rtype: ResourceType = T, key: str = "topic") -> Rule:
    return Rule(op, rtype, _msgpack(key), binary=True)


def _group(op: Operation) -> Rule:
    return Rule(op, G, _path("group"))


V3C = "/v3/clusters/{cluster_id}"
V3T = V3C + "/topics/{topic}"
V3G = V3C + "/consumer-groups/{group}"
INST = "/consumers/{group}/instances/{instance}"
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE

BINARY: dict[str, Rule] = {
    "produce": _bin(W),
    "fetch": _bin(R),
    "list_offsets": _bin(D),
    "init_producer_id": Rule(Operation.IDEMPOTENT_WRITE, binary=True),
    "group/find_coordinator": _bin(D, G, "group"),
    "group/join": _bin(R, G, "group"),
    "group/sync": _bin(R, G, "group"),
    "group/heartbeat": _bin(R, G, "group"),
    "group/leave": _bin(R, G, "group"),
    "group/commit": _bin(R, G, "group"),
    "group/fetch_offsets": _bin(D, G, "group"),
    "group/describe": _bin(D, G, "group"),
    "group/lag": _bin(D, G, "group"),
    "group/list": Rule(D, binary=True),
    "group/reset_offsets": _bin(R, G, "group"),
    "group/delete": _bin(Operation.DELETE, G, "group"),
    "group/delete_offsets": _bin(Operation.DELETE, G, "group"),
    "group/txn_commit": _bin(R, G, "group"),  # Kafka's TxnOffsetCommit
    # The transaction coordinator (Kafka's FindCoordinator, InitProducerId, AddPartitions-
    # ToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions on the TRANSACTIONAL_ID).
    "txn/find_coordinator": _bin(D, X, "transactional_id"),
    "txn/init_producer_id": _bin(W, X, "transactional_id"),
    "txn/add_partitions": _bin(W, X, "transactional_id"),
    "txn/add_offsets": _bin(W, X, "transactional_id"),
    "txn/end_txn": _bin(W, X, "transactional_id"),
    "txn/describe": _bin(D, X, "transactional_id"),
}

RULES: dict[tuple[str, str], Rule] = {
    **{("POST", f"/binary/v1/{route}"): rule for route, rule in BINARY.items()},
    ("GET", "/v3/broker/metadata"): AUTHENTICATED,
    ("GET", "/openapi.json"): AUTHENTICATED,
    ("GET", "/openapi"): AUTHENTICATED,
    # The read-only web console: its pages need a login, what it shows is the cluster's.
    ("GET", "/console"): AUTHENTICATED,
    ("GET", "/console/"): AUTHENTICATED,
    ("GET", "/console/static"): AUTHENTICATED,
    **{
        ("GET", f"/console/api/{p}"): CLUSTER_DESCRIBE
        for p in (
            "local",
            "cluster",
            "topics",
            "topics/{topic}",
            "reports",
            "reports/{run}",
            "settings",
        )
    },
    ("GET", "/metrics"): CLUSTER_DESCRIBE,
    ("GET", "/v3/quorum/status"): CLUSTER_DESCRIBE,
    ("GET", "/v3/quorum/metadata"): CLUSTER_DESCRIBE,
    # v3
    ("GET", "/v3/clusters"): AUTHENTICATED,
    ("GET", V3C): AUTHENTICATED,
    ("GET", V3C + "/brokers"): AUTHENTICATED,
    ("GET", V3C + "/brokers/{broker_id}"): AUTHENTICATED,
    ("GET", V3C + "/topics"): AUTHENTICATED,  # filtered
    ("POST", V3C + "/topics"): Rule(Operation.CREATE, T, _json("topic_name"), also_cluster=True),
    ("GET", V3T): _topic(D),
    ("DELETE", V3T): _topic(Operation.DELETE),
    ("PATCH", V3T): _topic(Operation.ALTER),
    ("GET", V3T + "/configs"): _topic(Operation.DESCRIBE_CONFIGS),
    ("POST", V3T + "/configs:alter"): _topic(Operation.ALTER_CONFIGS),
    ("GET", V3T + "/configs/{name}"): _topic(Operation.DESCRIBE_CONFIGS),
    ("PUT", V3T + "/configs/{name}"): _topic(Operation.ALTER_CONFIGS),
    ("DELETE", V3T + "/configs/{name}"): _topic(Operation.ALTER_CONFIGS),
    ("GET", V3T + "/partitions"): _topic(D),
    ("GET", V3T + "/partitions/{partition}"): _topic(D),
    ("GET", V3T + "/partitions/{partition}/offset"): _topic(D),
    ("GET", V3T + "/partitions/{partition}/records"): _topic(R),
    ("POST", V3T + "/records"): _topic(W),
    ("POST", V3T + "/records:batch"): _topic(W),
    ("GET", V3C + "/consumer-groups"): CLUSTER_DESCRIBE,
    # Broker configs, reassignments, elections (Kafka's DescribeConfigs on the BROKER
    # resource, which ACLs name as the CLUSTER; List/AlterPartitionReassignments,
    # ElectLeaders), DeleteRecords.
    ("GET", V3C + "/broker-configs"): Rule(Operation.DESCRIBE_CONFIGS),
    ("GET", V3C + "/broker-configs/{name}"): Rule(Operation.DESCRIBE_CONFIGS),
    ("GET", V3C + "/brokers/{broker_id}/configs"): Rule(Operation.DESCRIBE_CONFIGS),
    ("GET", V3C + "/brokers/{broker_id}/configs/{name}"): Rule(Operation.DESCRIBE_CONFIGS),
    ("GET", V3C + "/topics/-/partitions/-/reassignment"): CLUSTER_DESCRIBE,
    ("POST", V3C + "/topics/-/partitions/-/reassignment"): Rule(Operation.ALTER),
    ("GET", V3T + "/partitions/-/reassignment"): CLUSTER_DESCRIBE,
    ("GET", V3T + "/partitions/{partition}/reassignment"): CLUSTER_DESCRIBE,
    ("PATCH", V3T + "/partitions/{partition}/reassignment"): Rule(Operation.ALTER),
    ("DELETE", V3T + "/partitions/{partition}/reassignment"): Rule(Operation.ALTER),
    ("GET", V3C + "/reassignment-throttle"): Rule(Operation.DESCRIBE_CONFIGS),
    ("PUT", V3C + "/reassignment-throttle"): Rule(Operation.ALTER_CONFIGS),
    ("DELETE", V3C + "/reassignment-throttle"): Rule(Operation.ALTER_CONFIGS),
    ("POST", V3C + "/elections"): Rule(Operation.ALTER),
    ("POST", V3T + "/partitions/{partition}/records:delete"): _topic(Operation.DELETE),
    # Issue 19: transactional produce over HTTP: WRITE on the TRANSACTIONAL_ID here (when the
    # body names one), WRITE on each topic of its records in the route itself
    # (api.http.transactions), since a rule names one resource.
    ("POST", V3C + "/transactions"): Rule(W, X, _json("transactional_id")),
    # ACL and SCRAM administration (Kafka's DescribeAcls/CreateAcls/DeleteAcls and
    # Describe/AlterUserScramCredentials).
    ("GET", V3C + "/acls"): CLUSTER_DESCRIBE,
    ("POST", V3C + "/acls"): Rule(Operation.ALTER),
    ("DELETE", V3C + "/acls"): Rule(Operation.ALTER),
    ("POST", V3C + "/acls:batch"): Rule(Operation.ALTER),
    ("GET", V3C + "/users"): CLUSTER_DESCRIBE,
    ("POST", V3C + "/users"): Rule(Operation.ALTER),
    ("GET", V3C + "/users/{user}"): CLUSTER_DESCRIBE,
    ("DELETE", V3C + "/users/{user}"): Rule(Operation.ALTER),
    ("GET", V3G): _group(D),
    ("GET", V3G + "/consumers"): _group(D),
    ("GET", V3G + "/consumers/{consumer}"): _group(D),
    ("GET", V3G + "/consumers/{consumer}/assignments"): _group(D),
    ("GET", V3G + "/lags"): _group(D),
    ("GET", V3G + "/lags/{topic}/partitions/{partition}"): _group(D),
    ("GET", V3G + "/lag-summary"): _group(D),
    ("POST", V3G + "/offsets:reset"): _group(R),  # Kafka's AlterConsumerGroupOffsets
    ("POST", V3G + "/offsets:delete"): _group(Operation.DELETE),  # Kafka's OffsetDelete
    # v2 (REST Proxy)
    ("GET", "/topics"): AUTHENTICATED,  # filtered
    ("GET", "/topics/{topic}"): _topic(D),
    ("POST", "/topics/{topic}"): _topic(W),
    ("GET", "/topics/{topic}/partitions"): _topic(D),
    ("GET", "/topics/{topic}/partitions/{partition}"): _topic(D),
    ("POST", "/topics/{topic}/partitions/{partition}"): _topic(W),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"): _topic(D),
    ("GET", "/brokers"): AUTHENTICATED,
    ("POST", "/consumers/{group}"): _group(R),
    **{
        (method, INST + suffix): _group(R)
        for method, suffix in (
            ("DELETE", ""),
            ("POST", "/subscription"),
            ("GET", "/subscription"),
            ("DELETE", "/subscription"),
            ("POST", "/assignments"),
            ("GET", "/assignments"),
            ("POST", "/positions"),
            ("POST", "/positions/beginning"),
            ("POST", "/positions/end"),
            ("GET", "/records"),
            ("POST", "/offsets"),
            ("GET", "/offsets"),
        )
    },
}

_SR_READS = (
    "/subjects",
    "/schemas",
    "/schemas/types",
    "/schemas/ids/{id}",
    "/schemas/ids/{id}/schema",
    "/schemas/ids/{id}/versions",
    "/schemas/ids/{id}/subjects",
    "/config",
    "/mode",
)
RULES.update({("GET", p): AUTHENTICATED for p in _SR_READS})
# A subject's own reads (its versions, config, mode, a lookup or a compatibility test in it):
# DESCRIBE on the topic it names under TopicNameStrategy, which a topic's producers (WRITE)
# and consumers (READ) both have; a principal with no right on the topic gets the answer a
# missing subject gets, as a topic it may not describe is answered as missing.
RULES.update(
    {
        (m, p): Rule(D, T, _subject_topic)
        for m, p in (
            ("GET", "/subjects/{subject}/versions"),
            ("GET", "/subjects/{subject}/versions/{version}"),
            ("GET", "/subjects/{subject}/versions/{version}/schema"),
            ("GET", "/subjects/{subject}/versions/{version}/referencedby"),
            ("GET", "/config/{subject}"),
            ("GET", "/mode/{subject}"),
            ("POST", "/subjects/{subject}"),
            ("POST", "/compatibility/subjects/{subject}/versions/{version}"),
            ("POST", "/compatibility/subjects/{subject}/versions"),
        )
    }
)
RULES.update(
    {
        ("PUT", "/config"): Rule(Operation.ALTER_CONFIGS),
        ("DELETE", "/config"): Rule(Operation.ALTER_CONFIGS),
        ("PUT", "/mode"): Rule(Operation.ALTER_CONFIGS),
    }
)
RULES.update(
    {
        (m, p): Rule(W, T, _subject_topic)
        for m, p in (
            ("POST", "/subjects/{subject}/versions"),
            ("DELETE", "/subjects/{subject}/versions/{version}"),
            ("DELETE", "/subjects/{subject}"),
            ("PUT", "/config/{subject}"),
            ("DELETE", "/config/{subject}"),
            ("PUT", "/mode/{subject}"),
            ("DELETE", "/mode/{subject}"),
        )
    }
)

# Responses whose topic (or group) lists are cut to what the principal may DESCRIBE.
FILTERED = {
    ("GET", V3C + "/topics"),
    ("GET", "/topics"),
    ("GET", "/v3/broker/metadata"),
}


# Kafka's per-topic checks inside a group request (its KafkaApis): OffsetCommit,
# TxnOffsetCommit, OffsetDelete (and Longboat's offset reset, Kafka's AlterConsumerGroup-
# Offsets, an OffsetCommit) need READ on each topic: the partitions of a topic the principal
# may not read are answered TOPIC_AUTHORIZATION_FAILED (``partition_errors``) and the others
# done. OffsetFetch (and the lag, which shows the committed offsets) needs DESCRIBE on each
# topic: the others are left out of the answer. Route -> the body's (writes) or answer's
# (reads) list of ``[topic, partition, ...]`` entries.
GROUP_TOPIC_WRITES = {
    "commit": "offsets",
    "txn_commit": "offsets",
    "reset_offsets": "offsets",
    "delete_offsets": "partitions",
}
GROUP_TOPIC_READS = {"fetch_offsets": "offsets", "lag": "partitions"}
_GROUP_PREFIXES = ("/binary/v1/group/", "/internal/broker/v1/group/")
TOPIC_AUTHORIZATION_FAILED = "TOPIC_AUTHORIZATION_FAILED"


def _group_op(canonical: str) -> str | None:
    for prefix in _GROUP_PREFIXES:
        if canonical.startswith(prefix):
            op = canonical[len(prefix) :]
            return op if op in GROUP_TOPIC_WRITES or op in GROUP_TOPIC_READS else None
    return None


def _entry_topic(e: Any) -> str | None:
    """The topic of a ``[topic, partition, ...]`` entry; None for a malformed one (the
    route refuses it itself)."""
    return e[0] if isinstance(e, list) and len(e) >= 2 and isinstance(e[0], str) else None


async def _group_topics(
    az: Authorizer,
    request: web.Request,
    principal: str,
    op: str,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """The group route ``op`` with Kafka's per-topic checks for ``principal`` (see
    ``GROUP_TOPIC_WRITES``)."""
    host = _host(request)
    seen: dict[tuple[str, Operation], bool] = {}

    def may(topic: str, operation: Operation) -> bool:
        k = (topic, operation)
        if k not in seen:
            seen[k] = az.allows(principal, host, operation, T, topic)
        return seen[k]

    if op in GROUP_TOPIC_READS:
        # The coordinator asks the leaders for end offsets (the lag) as the node: the
        # answer is cut to the user's topics here, where a leader asked as the user would
        # hide a topic and leave the coordinator retrying it until it timed out.
        token = CURRENT_PRINCIPAL.set(None)
        try:
            response = await handler(request)
        finally:
            CURRENT_PRINCIPAL.reset(token)
        if isinstance(response, web.Response) and response.status == 200:
            key = GROUP_TOPIC_READS[op]
            body = response.body
            data = msgpack.unpackb(body, raw=False) if isinstance(body, bytes) else None
            rows = data.get(key) if isinstance(data, dict) else None
            if isinstance(data, dict) and isinstance(rows, list):
                keep = [r for r in rows if (t := _entry_topic(r)) is None or may(t, D)]
                if len(keep) != len(rows):
                    data[key] = keep
                    response.body = msgpack.packb(data, use_bin_type=True)
        return response
    key = GROUP_TOPIC_WRITES[op]
    try:
        data = msgpack.unpackb(await request.read(), raw=False)
    except Exception:  # the route refuses a bad body itself
        return await handler(request)
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return await handler(request)
    kept, refused = [], []
    for e in entries:
        t = _entry_topic(e)
        if t is None or may(t, R):
            kept.append(e)
        else:
            refused.append([t, e[1], TOPIC_AUTHORIZATION_FAILED])
    if not refused:
        return await handler(request)
    log.info(
        "denied: %s %s READ on TOPIC %s (group %s %s)",
        principal,
        host,
        ",".join(sorted({str(r[0]) for r in refused})),
        data.get("group"),
        op,
    )
    if not kept:
        # Nothing left to do: answered here, as Kafka answers without the coordinator.
        return web.Response(
            body=msgpack.packb({"error": "NONE", "partition_errors": refused}, use_bin_type=True),
            content_type="application/msgpack",
        )
    data[key] = kept
    request._read_bytes = msgpack.packb(data, use_bin_type=True)  # what the route reads
    response = await handler(request)
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        try:
            answer = msgpack.unpackb(response.body, raw=False)
        except Exception:
            return response
        if isinstance(answer, dict):
            answer["partition_errors"] = [*answer.get("partition_errors", []), *refused]
            response.body = msgpack.packb(answer, use_bin_type=True)
    return response


def request_allows(request: web.Request, op: Operation, rtype: ResourceType, name: str) -> bool:
    """Whether the request's principal may ``op`` on the resource (always, without an
    authorizer): for a route that shows several resources, each under its own right."""
    az = request.app.get(AUTHORIZER_KEY)
    principal = request.get(PRINCIPAL)
    if az is None or principal is None:
        return True
    return az.allows(principal, _host(request), op, rtype, name)


def read_topics_or_raise(request: web.Request, topics: Iterable[str], what: str) -> None:
    """A v3 group route that changes offsets of ``topics`` (a reset, an offset deletion):
    403 before anything is done unless the principal may READ each (the coordinator would
    refuse those partitions one by one and do the rest; over REST the request is one
    change). The same answer whether a topic exists or not, as Kafka's."""
    az = request.app.get(AUTHORIZER_KEY)
    principal = request.get(PRINCIPAL)
    if az is None or principal is None:
        return
    host = _host(request)
    refused = [t for t in dict.fromkeys(topics) if not az.allows(principal, host, R, T, t)]
    if refused:
        raise HttpError(
            403,
            f"{principal} is not authorized to READ on TOPIC {', '.join(refused)} "
            f"({what}); nothing was changed",
            40301,
        )


def rule_for(method: str, canonical: str) -> Rule | None:
    if method == "HEAD":
        method = "GET"
    if canonical.startswith("/internal/"):
        return NODE
    return RULES.get((method, canonical))


@dataclass
class Authorizer:
    acls: AclSource
    super_users: frozenset[str]
    allow_if_no_acl: bool = False

    def allows(
        self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
    ) -> bool:
        return authorize(
            self.acls.acls_on(rtype, name),
            principal,
            host,
            op,
            rtype,
            name,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )

    def writes_some_topic(self, principal: str, host: str) -> bool:
        """KIP-679: WRITE on any topic allows an idempotent producer id."""
        bindings: Iterable[AclBinding] = self.acls.acls_for(ResourceType.TOPIC)
        return any(
            b.resource_type is ResourceType.TOPIC
            and b.permission is Permission.ALLOW
            and b.operation in (Operation.WRITE, Operation.ALL)
            and b.matches_who(principal, host)
            for b in bindings
        )


AUTHORIZER_KEY: web.AppKey[Authorizer] = web.AppKey("authorizer", Authorizer)


def _forbidden(message: str) -> web.Response:
    return web.Response(
        status=403,
        body=orjson.dumps({"error_code": 40301, "message": message}),
        content_type=JSON,
    )


def _as_missing(rule: Rule, request: web.Request, name: str) -> web.Response:
    if rule.binary:
        partition = 0
        try:
            body = msgpack.unpackb(request._read_bytes or b"", raw=False)
            partition = int(body.get("partition", 0))
        except Exception:
            pass
        return web.Response(
            body=msgpack.packb(
                {
                    "error": "UNKNOWN_TOPIC_OR_PARTITION",
                    "message": f"{name}-{partition} does not exist",
                    "leader_id": -1,
                },
                use_bin_type=True,
            ),
            content_type="application/x-msgpack",
        )
    err = topic_not_found(name)
    return web.Response(
        status=err.status,
        body=orjson.dumps({"error_code": err.error_code, "message": err.message}),
        content_type=JSON,
    )


def _host(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return str(peer[0]) if peer else "*"


async def check(
    az: Authorizer, request: web.Request, rule: Rule, principal: str
) -> web.Response | None:
    """None when ``principal`` may do what ``rule`` says on this request; else the answer."""
    if rule.operation is None:
        return None  # authenticated (or an anonymous listener's ANONYMOUS) is enough
    host = _host(request)
    name = await rule.name(request)
    if name is None:
        return None  # the route refuses the body itself (nothing is done)
    op, rtype = rule.operation, rule.resource_type
    if az.allows(principal, host, op, rtype, name):
        return None
    if rule.also_cluster and az.allows(principal, host, op, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    if op is Operation.IDEMPOTENT_WRITE and az.writes_some_topic(principal, host):
        return None
    if (
        rtype is ResourceType.TOPIC
        and op is not Operation.CREATE
        and not az.allows(principal, host, Operation.DESCRIBE, rtype, name)
    ):
        return _as_missing(rule, request, name)
    log.info("denied: %s %s %s on %s %s", principal, host, op, rtype, name)
    return _forbidden(
        f"{principal} is not authorized to {op} on {rtype} {name}"
        if rtype is not ResourceType.CLUSTER
        else f"{principal} is not authorized to {op} on the CLUSTER"
    )


@web.middleware
async def authz_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    az = request.app.get(AUTHORIZER_KEY)
    principal = request.get(PRINCIPAL)
    resource = request.match_info.route.resource
    if az is None or principal is None or resource is None:
        return await handler(request)  # no authorizer, or an unknown path (404)
    canonical = resource.canonical
    if canonical in ("/v3/health", "/v3/health/ready"):
        return await handler(request)
    rule = rule_for(request.method, canonical)
    if rule is None:
        log.error("no authorization rule for %s %s: refused", request.method, canonical)
        return _forbidden(f"{request.method} {canonical} has no authorization rule")
    if rule is NODE:
        node = request.get(VIA, principal)
        refusal = await check(az, request, NODE, node)
        if refusal is None and VIA in request:
            twin = canonical.replace("/internal/broker/v1/", "/binary/v1/")
            user_rule = RULES.get(("POST", twin))
            if user_rule is not None:
                refusal = await check(az, request, user_rule, principal)
    else:
        refusal = await check(az, request, rule, principal)
    if refusal is not None:
        return refusal
    group_op = _group_op(canonical)
    if group_op is not None and (rule is not NODE or VIA in request):
        # A user's group request (a node's own, without a user, has every right).
        return await _group_topics(az, request, principal, group_op, handler)
    response = await handler(request)
    key = ("GET" if request.method == "HEAD" else request.method, canonical)
    if key in FILTERED and isinstance(response, web.Response) and response.status == 200:
        _filter_topics(az, request, principal, key[1], response)
    return response


def _filter_topics(
    az: Authorizer, request: web.Request, principal: str, canonical: str, response: web.Response
) -> None:
    body = response.body
    if not isinstance(body, bytes):
        return
    host = _host(request)

    def ok(name: Any) -> bool:
        return isinstance(name, str) and az.allows(principal, host, D, T, name)

    data: Any = orjson.loads(body)
    if canonical == "/topics" and isinstance(data, list):
        data = [t for t in data if ok(t)]
    elif canonical == "/v3/broker/metadata" and isinstance(data, dict):
        data["topics"] = [t for t in data.get("topics", []) if ok(t.get("name"))]
    elif isinstance(data, dict):
        data["data"] = [t for t in data.get("data", []) if ok(t.get("topic_name"))]
    response.body = orjson.dumps(data)
