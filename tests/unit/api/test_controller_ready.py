"""A controller's readiness: not ready while it replays what it knew committed; once caught
up, the instant between an entry's commit and its apply (twice a second, the NoOpRecord) does
not flap it to 503, while a lag of ``READY_MAX_LAG`` entries or more does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson

from api.node.controller_app import (
    CATCH_UP_KEY,
    ESSENTIALS_KEY,
    READY_MAX_LAG,
    SERVICE_KEY,
    CatchUp,
    handle_ready,
)


def ready(catch_up: CatchUp, applied: int, commit: int) -> tuple[int, Any]:
    status = SimpleNamespace(applied=applied, commit=commit, leader_id=1, role="follower", term=3)
    request = SimpleNamespace(
        app={
            SERVICE_KEY: SimpleNamespace(node=SimpleNamespace(status=lambda: status)),
            ESSENTIALS_KEY: SimpleNamespace(failure=None),
            CATCH_UP_KEY: catch_up,
        }
    )
    resp = asyncio.run(handle_ready(request))  # type: ignore[arg-type]
    return resp.status, orjson.loads(resp.body)


def test_a_replaying_node_is_not_ready_until_it_has_applied_its_commit() -> None:
    c = CatchUp()
    status, body = ready(c, 10, 15)
    assert (status, body["reasons"]) == (503, ["applied 10 < commit 15"])
    assert ready(c, 14, 15)[0] == 503  # one short is still replaying
    assert ready(c, 15, 15)[0] == 200


def test_once_caught_up_a_one_entry_gap_stays_ready() -> None:
    c = CatchUp()
    assert ready(c, 14, 14)[0] == 200
    status, body = ready(c, 14, 15)  # the NoOpRecord committed, not applied yet
    assert (status, body["reasons"]) == (200, [])
    assert ready(c, 15 + READY_MAX_LAG - 1, 15 + 2 * READY_MAX_LAG - 2)[0] == 200


def test_a_caught_up_node_that_falls_far_behind_is_not_ready() -> None:
    c = CatchUp()
    assert ready(c, 5, 5)[0] == 200
    status, body = ready(c, 5, 5 + READY_MAX_LAG)
    assert status == 503
    assert body["reasons"] == [f"applied 5 < commit {5 + READY_MAX_LAG}"]
