"""Every route a broker or controller serves has an authorization rule (the authorizer
refuses a route without one, so a new route without a rule would be unusable on a secure
cluster: this test names it first), and node routes are CLUSTER_ACTION."""

from __future__ import annotations

import logging
from pathlib import Path

from aiohttp import web

from api.http.authz import NODE, rule_for
from api.node.broker_app import build_broker
from api.node.config import ListenerKind, load_config
from api.node.controller_app import build_controller
from api.node.listeners import route_kind
from metalog.security import Operation


def _routes(app: web.Application) -> set[tuple[str, str]]:
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}


def _apps(tmp_path: Path) -> set[tuple[str, str]]:
    logging.disable(logging.CRITICAL)
    try:
        broker = load_config(
            None,
            {"node_id": 101, "data_dir": str(tmp_path / "b"), "controller_quorum": "1@h:1"},
        )
        controller = load_config(
            None,
            {
                "node_id": 1,
                "roles": "controller",
                "data_dir": str(tmp_path / "c"),
                "controller_quorum": "1@h:1",
            },
        )
        b, _ = build_broker(broker, autostart=False)
        c, _ = build_controller(controller)
        return _routes(b) | _routes(c)
    finally:
        logging.disable(logging.NOTSET)


def test_every_route_has_a_rule(tmp_path: Path) -> None:
    routes = _apps(tmp_path)
    assert len(routes) > 100
    missing = sorted(
        (m, p)
        for m, p in routes
        if p not in ("/v3/health", "/v3/health/ready") and rule_for(m, p) is None
    )
    assert missing == []


def test_node_routes_need_cluster_action_and_live_on_node_listeners(tmp_path: Path) -> None:
    for method, path in _apps(tmp_path):
        if path.startswith("/internal/"):
            assert rule_for(method, path) is NODE
            assert NODE.operation is Operation.CLUSTER_ACTION
            assert route_kind(path) in (ListenerKind.BROKER, ListenerKind.CONTROLLER)
        elif path.startswith("/binary/"):
            assert route_kind(path) is ListenerKind.CLIENT


def test_registry_routes_are_their_own_kind_served_on_client_listeners_too(
    tmp_path: Path,
) -> None:
    from api.http.schemas import add_schema_registry_routes
    from api.node.config import ListenerSettings, ListenerSpec, SecurityProtocol
    from api.node.listeners import serves

    registry = web.Application()
    add_schema_registry_routes(registry)
    reg_paths = {p for _, p in _routes(registry)}
    # Exactly the registry's routes are SCHEMA_REGISTRY ones: none of the REST API's.
    for _, path in _apps(tmp_path):
        assert (route_kind(path) is ListenerKind.SCHEMA_REGISTRY) == (path in reg_paths), path

    def spec(*kinds: ListenerKind) -> ListenerSpec:
        return ListenerSpec(
            name="L",
            host="h",
            port=1,
            protocol=SecurityProtocol.PLAINTEXT,
            kinds=frozenset(kinds),
            settings=ListenerSettings(),
        )

    client, own = spec(ListenerKind.CLIENT), spec(ListenerKind.SCHEMA_REGISTRY)
    assert serves(client, ListenerKind.SCHEMA_REGISTRY) and serves(
        own, ListenerKind.SCHEMA_REGISTRY
    )
    assert not serves(own, ListenerKind.CLIENT) and not serves(own, ListenerKind.BROKER)
    assert serves(own, route_kind("/v3/health"))
    assert not serves(spec(ListenerKind.BROKER), ListenerKind.SCHEMA_REGISTRY)
