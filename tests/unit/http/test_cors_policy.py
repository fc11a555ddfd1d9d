"""``api.http.cors``: off by default, and which origins it allows."""

from __future__ import annotations

from aiohttp import web

from api.http.cors import CorsPolicy, add_cors


def test_no_origins_registers_nothing() -> None:
    app = web.Application()
    assert add_cors(app, ()) is None and add_cors(app, [" "]) is None
    assert not app.middlewares and not app.on_response_prepare


def test_origins_match_exactly_or_by_star() -> None:
    p = CorsPolicy(["https://ui.example/", "http://localhost:3000"])
    assert p.allows("https://ui.example") and p.allows("http://localhost:3000")
    assert not p.allows("http://ui.example") and not p.allows("http://localhost:3001")
    assert not p.allows(None)
    assert p.allow_origin_value("https://ui.example") == "https://ui.example"
    star = CorsPolicy(["*"])
    assert star.allows("http://anything") and star.allow_origin_value("http://x") == "*"
