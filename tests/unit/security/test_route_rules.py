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
