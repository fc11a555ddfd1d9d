"""The pure parts of the HTTP transactional produce (``api.http.transactions``): the runs an
answer is kept as in the offset metadata, and the per-topic WRITE check the route makes
under the authorizer (its rule names only the transactional id)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from api.http.auth import PRINCIPAL
from api.http.authz import AUTHORIZER_KEY, Authorizer
from api.http.errors import HttpError
from api.http.transactions import (
    acting_principal,
    authorize_topics_or_raise,
    placed_of,
    runs_of,
)
from metalog.security import AclBinding, Operation, PatternType, Permission, ResourceType


def test_runs_round_trip_and_merge_only_consecutive_offsets_of_one_partition() -> None:
    placed = [("a", 0, 5), ("a", 0, 6), ("b", 1, 0), ("a", 0, 7), ("a", 0, 9), ("a", 1, 10)]
    runs = runs_of(placed)
    assert runs == [["a", 0, 5, 2], ["b", 1, 0, 1], ["a", 0, 7, 1], ["a", 0, 9, 1], ["a", 1, 10, 1]]
    assert placed_of(runs) == placed
    assert runs_of([]) == [] and placed_of([]) == []


@dataclass
class Acls:
    bindings: list[AclBinding]

    def acls_for(self, rtype: ResourceType) -> list[AclBinding]:
        return [b for b in self.bindings if b.resource_type is rtype]

    def acls_on(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        return [b for b in self.bindings if b.matches_resource(rtype, name)]


def _allow(op: Operation, topic: str) -> AclBinding:
    return AclBinding(
        "User:alice", "*", ResourceType.TOPIC, topic, PatternType.LITERAL, op, Permission.ALLOW
    )


def _request(bindings: list[AclBinding]) -> web.Request:
    app = web.Application()
    app[AUTHORIZER_KEY] = Authorizer(Acls(bindings), frozenset())
    req = make_mocked_request("POST", "/v3/clusters/c/transactions", app=app)
    req[PRINCIPAL] = "User:alice"
    return req


def test_every_topic_needs_write_and_an_undescribable_one_is_missing() -> None:
    req = _request([_allow(Operation.WRITE, "orders"), _allow(Operation.DESCRIBE, "audit")])
    authorize_topics_or_raise(req, ["orders", "orders"])
    with pytest.raises(HttpError) as e:
        authorize_topics_or_raise(req, ["orders", "audit"])
    assert (e.value.status, e.value.error_code) == (403, 40301)
    with pytest.raises(HttpError) as e:
        authorize_topics_or_raise(req, ["orders", "secret"])
    assert (e.value.status, e.value.error_code) == (404, 40401)


def test_without_an_authorizer_nothing_is_checked() -> None:
    req = make_mocked_request("POST", "/v3/clusters/c/transactions", app=web.Application())
    authorize_topics_or_raise(req, ["anything"])


def test_without_a_transactional_id_the_caller_needs_idempotent_write() -> None:
    cluster_iw = AclBinding(
        "User:alice",
        "*",
        ResourceType.CLUSTER,
        "kafka-cluster",
        PatternType.LITERAL,
        Operation.IDEMPOTENT_WRITE,
        Permission.ALLOW,
    )
    # WRITE on a topic implies it (KIP-679); so does the CLUSTER grant; DESCRIBE does not.
    authorize_topics_or_raise(
        _request([_allow(Operation.WRITE, "orders")]), ["orders"], transactional=False
    )
    authorize_topics_or_raise(_request([cluster_iw]), [], transactional=False)
    with pytest.raises(HttpError) as e:
        authorize_topics_or_raise(
            _request([_allow(Operation.DESCRIBE, "orders")]), [], transactional=False
        )
    assert (e.value.status, e.value.error_code) == (403, 40301)
    assert "IDEMPOTENT_WRITE" in e.value.message


def test_the_producer_acts_for_the_caller_except_for_the_brokers_bookkeeping() -> None:
    for route in ("produce", "txn/init_producer_id", "txn/add_partitions", "txn/end_txn"):
        assert acting_principal(route, "User:carol", internal=False) == "User:carol"
    # The broker's own ids and the request-id bookkeeping group are the node's; produce
    # through them is still the caller's.
    assert acting_principal("txn/init_producer_id", "User:carol", internal=True) is None
    assert acting_principal("produce", "User:carol", internal=True) == "User:carol"
    for route in ("group/txn_commit", "group/fetch_offsets", None):
        assert acting_principal(route, "User:carol", internal=False) is None


def test_a_kept_producers_calls_carry_the_current_holder_not_the_creator() -> None:
    """Background tasks of a producer inherit the context of the request that started
    them; the transport's ``acting_as`` names whoever holds it now."""
    import contextvars

    from api.client.transport import Transport
    from common.principal import CURRENT_PRINCIPAL, PRINCIPAL_HEADER

    holder = {"who": "User:carol"}
    t = Transport()
    t.acting_as = lambda route: acting_principal(route, holder["who"], internal=False)
    ctx = contextvars.copy_context()
    ctx.run(CURRENT_PRINCIPAL.set, "User:creator")
    assert ctx.run(t._headers, "produce") == {PRINCIPAL_HEADER: "User:carol"}
    holder["who"] = "User:dave"
    assert ctx.run(t._headers, "produce") == {PRINCIPAL_HEADER: "User:dave"}
    assert ctx.run(t._headers, "group/txn_commit") == {}
    # Without the hook, the inherited context decides (the v2 consumer instances' way).
    assert ctx.run(Transport()._headers, "produce") == {PRINCIPAL_HEADER: "User:creator"}
