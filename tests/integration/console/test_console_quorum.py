"""The console's quorum view asks the voters in the broker's config, and the voters they name.

Fake controllers (aiohttp apps on 127.0.0.1 answering ``/v3/quorum/status``) stand in for a
quorum that gained voter 4 after the broker's config was written, and lost voter 3.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from api.http.console import Console


async def _serve(status: dict[str, Any]) -> tuple[web.AppRunner, str]:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response(status)

    app = web.Application()
    app.router.add_get("/v3/quorum/status", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def test_voters_added_since_the_config_are_asked_too() -> None:
    async def main() -> dict[int, Any]:
        r4, url4 = await _serve({"node_id": 4, "role": "follower", "voters": [1, 4]})
        r1, url1 = await _serve(
            {
                "node_id": 1,
                "role": "leader",
                "last_index": 10,
                "voters": [1, 4],
                "addresses": {"1": "unused", "4": url4},
                "followers": [{"node_id": 4, "match": 7}],
            }
        )
        down = "http://127.0.0.1:9"  # voter 3: nothing listens on the discard port
        c = Console(ctx=None, local_rows=list, voter_urls={1: url1, 3: down}, reports_dir=None)  # type: ignore[arg-type]
        try:
            return await c.quorum_statuses()
        finally:
            await c.close()
            await r1.cleanup()
            await r4.cleanup()

    statuses = asyncio.run(main())
    assert sorted(statuses) == [1, 3, 4]
    assert isinstance(statuses[4], dict) and statuses[4]["node_id"] == 4
    assert isinstance(statuses[3], str)  # the error reaching it, shown on the page
