"""The web console: a page served by every broker at ``/console/``.

The page (``console_static/``: plain HTML, CSS and JavaScript, no build step, nothing from a
CDN) reads the public API (``/v3/clusters/...``: brokers, topic configs, partitions' records,
consumer groups) and the few JSON reads it lacks, added here under ``/console/api/``:

* ``GET /console/api/local``      this broker's replicas (``console_view`` rows) and its
  throughput history; what the serving broker gathers from every broker.
* ``GET /console/api/cluster``    the overview: brokers, the controller quorum and its lag,
  partition health (``console_view.cluster_view``).
* ``GET /console/api/topics``     every topic with partitions, offsets held, size, health and
  current throughput; ``GET /console/api/topics/{topic}`` one topic with every partition
  (leader, replicas, ISR, offsets, size) and its throughput over the last minutes.
* ``GET /console/api/settings``  what the page may offer: ``{"admin_enabled"}`` (the node's
  ``console_admin_enabled``; off, the page shows no admin action and makes no write call).
  Admin actions go to the public REST routes, never to a console route: the broker's
  authentication and ACLs judge the console's user as they judge curl.
* ``GET /console/api/reports``    the fault-injection runs (``jepsen_tests`` run directories,
  each with a ``results.json``) under the node's ``console_reports_dir`` (off when unset);
  ``.../reports/{run}`` one run's results and schedule; ``.../reports/{run}/report.html``
  its HTML report.

The serving broker asks every registered broker for its replica report at once (its own
without HTTP), with a short timeout: a broker that does not answer is shown as unreachable
and its partitions' offsets as unknown, and the page still loads. Answers are cached for
``GATHER_CACHE_S`` so a page polling every few seconds in several tabs costs one fan-out.

Each broker samples its led partitions' log end offsets and sizes every
``THROUGHPUT_INTERVAL_MS`` (a task that lives with the app) into a ring of
``THROUGHPUT_SAMPLES_MAX`` samples: the throughput plots need no history kept elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from api.http import console_view
from api.http.context import HttpContext, json_response
from api.http.errors import HttpError, topic_not_found
from broker.endpoints import endpoint_url
from common import netbind

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "console_static"
THROUGHPUT_INTERVAL_MS = 2_000
THROUGHPUT_SAMPLES_MAX = 180  # 6 minutes
GATHER_TIMEOUT_S = 2.0
GATHER_CACHE_S = 1.0
REPORTS_DEPTH_MAX = 3
"""How deep under ``console_reports_dir`` runs are looked for (a sweep's runs sit one level
down); a run directory's own ``data/`` and ``logs/`` are never entered."""
REPORTS_LISTED_MAX = 500
RESULTS_BYTES_MAX = 32 << 20


Gathered = tuple[dict[int, list[Any]], dict[int, str], dict[str, list[list[float]]]]
"""``(reports, unreachable, throughput)``: see ``Console.gather``."""


class Console:
    """The console's state on one broker: its throughput ring, the HTTP session it asks
    other nodes with, and the caches of gathered answers."""

    def __init__(
        self,
        ctx: HttpContext,
        local_rows: Callable[[], list[console_view.Row]],
        voter_urls: dict[int, str],
        reports_dir: Path | None,
        admin_enabled: bool = False,
    ) -> None:
        self.ctx = ctx
        self.local_rows = local_rows
        self.voter_urls = voter_urls
        self.reports_dir = reports_dir
        self.admin_enabled = admin_enabled
        self.history = console_view.ThroughputHistory(
            THROUGHPUT_INTERVAL_MS, THROUGHPUT_SAMPLES_MAX
        )
        self._session: aiohttp.ClientSession | None = None
        self._gathered: tuple[float, Gathered] | None = None
        self._gather_lock = asyncio.Lock()
        self._reports: dict[str, tuple[float, dict[str, Any]]] = {}
        """run id -> (mtime of results.json, summary)."""

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=GATHER_TIMEOUT_S),
                connector=netbind.connector(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------ local

    def local_json(self) -> dict[str, Any]:
        return {
            "broker_id": self.ctx.broker_id,
            "replicas": self.local_rows(),
            "throughput": self.history.to_json(),
        }

    def sample(self, now_ms: int) -> None:
        v = console_view
        self.history.sample(
            now_ms,
            (
                (r[v.TOPIC], r[v.PARTITION], r[v.LOG_END], r[v.SIZE])
                for r in self.local_rows()
                if r[v.ROLE] == "leader"
            ),
        )

    async def run_sampler(self) -> None:
        failing = False
        while True:
            now_ms = int(time.time() * 1000)
            await asyncio.sleep((self.history.next_sample_ms(now_ms) - now_ms) / 1000)
            try:
                self.sample(int(time.time() * 1000))
                failing = False
            except Exception:  # a log closing under us: the next sample is as good
                if not failing:  # said once per run of failures, not every 2 s
                    log.exception("console: throughput sample failed")
                failing = True

    # ------------------------------------------------------------------ gathering

    async def _get(self, url: str) -> Any:
        async with self.session().get(url) as resp:
            resp.raise_for_status()
            return await resp.json(loads=orjson.loads)

    async def gather(self) -> Gathered:
        """``(reports, unreachable, throughput)``: every registered broker's replica rows,
        the brokers that did not answer (with why), and the merged throughput series."""
        async with self._gather_lock:
            now = time.monotonic()
            if self._gathered is not None and now - self._gathered[0] < GATHER_CACHE_S:
                return self._gathered[1]
            image = self.ctx.image
            targets: dict[int, str] = {}
            for b in image.brokers.brokers.values():
                # The client endpoint with its scheme: https on a secure cluster (issue 18),
                # dialled with the node's certificate (netbind).
                url = endpoint_url(b.endpoints, None)
                if int(b.broker_id) != self.ctx.broker_id and url is not None:
                    targets[int(b.broker_id)] = f"{url}/console/api/local"

            async def one(bid: int, url: str) -> tuple[int, Any]:
                try:
                    return bid, await self._get(url)
                except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
                    return bid, f"{type(e).__name__}: {e}".rstrip(": ")

            answers: dict[int, Any] = dict(
                await asyncio.gather(*(one(b, u) for b, u in targets.items()))
            )
            answers[self.ctx.broker_id] = self.local_json()
            reports: dict[int, list[Any]] = {}
            unreachable: dict[int, str] = {}
            histories = []
            for bid, a in answers.items():
                if isinstance(a, dict):
                    reports[bid] = a.get("replicas", [])
                    histories.append(a.get("throughput", []))
                else:
                    unreachable[bid] = a
            out = (reports, unreachable, console_view.merge_throughput(histories))
            self._gathered = (time.monotonic(), out)
            return out

    async def quorum_statuses(self) -> dict[int, dict[str, Any] | str]:
        async def one(node_id: int, url: str) -> tuple[int, dict[str, Any] | str]:
            try:
                return node_id, await self._get(f"{url}/v3/quorum/status")
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
                return node_id, f"{type(e).__name__}: {e}".rstrip(": ")

        out = dict(await asyncio.gather(*(one(n, u) for n, u in self.voter_urls.items())))
        # Voters added since this broker's config was written (``quorum add-voter``) are
        # known to the ones it has: ask them too.
        known: dict[int, str] = {}
        for st in out.values():
            if isinstance(st, dict):
                addresses = st.get("addresses") or {}
                for v in st.get("voters") or []:
                    if int(v) not in out and str(v) in addresses:
                        known[int(v)] = str(addresses[str(v)])
        if known:
            out.update(await asyncio.gather(*(one(n, u) for n, u in known.items())))
        return out

    # ------------------------------------------------------------------ reports

    def _run_dirs(self) -> list[Path]:
        root = self.reports_dir
        if root is None or not root.is_dir():
            return []
        found: list[Path] = []

        def walk(d: Path, depth: int) -> None:
            if (d / "results.json").is_file():
                found.append(d)
                return  # a run's own subdirectories hold data and logs, not runs
            if depth >= REPORTS_DEPTH_MAX:
                return
            try:
                children = sorted(c for c in d.iterdir() if c.is_dir())
            except OSError:
                return
            for c in children:
                if not c.name.startswith("."):
                    walk(c, depth + 1)

        walk(root, 0)
        return found

    def run_id(self, d: Path) -> str:
        assert self.reports_dir is not None
        rel = d.relative_to(self.reports_dir).as_posix()
        # The directory itself may be one run: named by its own name, as "." would not
        # survive a browser's URL normalisation.
        return d.name if rel == "." else rel

    def reports_list(self) -> list[dict[str, Any]]:
        out = []
        for d in self._run_dirs():
            rid = self.run_id(d)
            try:
                mtime = (d / "results.json").stat().st_mtime
            except OSError:
                continue
            cached = self._reports.get(rid)
            if cached is None or cached[0] != mtime:
                cached = (mtime, _run_summary(rid, d, mtime))
                self._reports[rid] = cached
            out.append(cached[1])
        out.sort(key=lambda s: -float(s["mtime"]))
        return out[:REPORTS_LISTED_MAX]

    def run_dir_or_404(self, rid: str) -> Path:
        # Only a directory the scan found: a run id is never joined to a path unchecked.
        for d in self._run_dirs():
            if self.run_id(d) == rid:
                return d
        raise HttpError(404, f"No fault-injection run {rid!r}.", 404)


def _read_json(path: Path) -> Any:
    if path.stat().st_size > RESULTS_BYTES_MAX:
        raise ValueError(f"{path.name} is larger than {RESULTS_BYTES_MAX} bytes")
    return json.loads(path.read_text())


def _run_summary(rid: str, d: Path, mtime: float) -> dict[str, Any]:
    out: dict[str, Any] = {"run": rid, "mtime": mtime, "has_report": (d / "report.html").is_file()}
    try:
        res = _read_json(d / "results.json")
    except (OSError, ValueError) as e:
        out["error"] = f"results.json: {e}"
        return out
    if not isinstance(res, dict):
        out["error"] = "results.json: not a JSON object"
        return out
    cfg, result = res.get("config"), res.get("result")
    cfg = cfg if isinstance(cfg, dict) else {}
    result = result if isinstance(result, dict) else {}
    out.update(
        workload=cfg.get("workload"),
        nemeses=cfg.get("nemeses", []),
        seed=cfg.get("seed"),
        time_limit_s=cfg.get("time_limit_s"),
        valid=result.get("valid"),
        counts=result.get("counts", {}),
        ops=res.get("ops"),
        wall_time_s=res.get("wall_time_s"),
    )
    return out


CONSOLE_KEY: web.AppKey[Console] = web.AppKey("console", Console)


def _console(request: web.Request) -> Console:
    return request.app[CONSOLE_KEY]


async def index(request: web.Request) -> web.StreamResponse:
    if request.path == "/console":
        raise web.HTTPFound("/console/")
    return web.FileResponse(STATIC_DIR / "index.html", headers=_INDEX_HEADERS)


_INDEX_HEADERS = {
    "Cache-Control": "no-cache",
    # The page shows what producers wrote (keys, values, headers, topic names): it only ever
    # inserts them as text, and this policy makes sure nothing else the page might hold
    # would run (no inline script, nothing from another origin, no framing).
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'none'",
}


async def local(request: web.Request) -> web.Response:
    return json_response(_console(request).local_json())


async def cluster(request: web.Request) -> web.Response:
    c = _console(request)
    (reports, unreachable, _), statuses = await asyncio.gather(c.gather(), c.quorum_statuses())
    out = console_view.cluster_view(c.ctx.image, reports, unreachable, statuses)
    out["cluster_id"] = c.ctx.cluster_id
    out["served_by"] = c.ctx.broker_id
    return json_response(out)


async def topics(request: web.Request) -> web.Response:
    c = _console(request)
    reports, unreachable, throughput = await c.gather()
    return json_response(
        {
            "topics": console_view.topics_view(c.ctx.image, reports, throughput),
            "unreachable_brokers": sorted(unreachable),
        }
    )


async def topic(request: web.Request) -> web.Response:
    c = _console(request)
    name = request.match_info["topic"]
    t = c.ctx.image.topics.get(name)
    if t is None:
        raise topic_not_found(name)
    reports, unreachable, throughput = await c.gather()
    out = console_view.topic_view(c.ctx.image, t, reports, throughput)
    out["unreachable_brokers"] = sorted(unreachable)
    out["interval_ms"] = THROUGHPUT_INTERVAL_MS
    return json_response(out)


async def settings(request: web.Request) -> web.Response:
    return json_response({"admin_enabled": _console(request).admin_enabled})


async def reports(request: web.Request) -> web.Response:
    c = _console(request)
    return json_response(
        {
            "enabled": c.reports_dir is not None,
            "runs": await asyncio.to_thread(c.reports_list),
        }
    )


async def report(request: web.Request) -> web.StreamResponse:
    c = _console(request)
    rid = request.match_info["run"]
    want_html = rid.endswith("/report.html")
    if want_html:
        rid = rid.removesuffix("/report.html")
    d = await asyncio.to_thread(c.run_dir_or_404, rid)
    if want_html:
        if not (d / "report.html").is_file():
            raise HttpError(404, f"Run {rid!r} has no report.html.", 404)
        # The report is the suite's own output; still, it may not run script against this
        # origin's API (a report is data, not part of the console).
        return web.FileResponse(
            d / "report.html",
            headers={
                "Content-Security-Policy": "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
            },
        )

    def load() -> dict[str, Any]:
        out: dict[str, Any] = {"run": rid, "has_report": (d / "report.html").is_file()}
        for name in ("results", "schedule"):
            p = d / f"{name}.json"
            try:
                out[name] = _read_json(p)
            except FileNotFoundError:
                out[name] = None
            except (OSError, ValueError) as e:
                out[name] = None
                out[f"{name}_error"] = str(e)
        return out

    return json_response(await asyncio.to_thread(load))


def local_rows_of(replicas: Any) -> Callable[[], list[console_view.Row]]:
    """This broker's replica rows, read from the ``ReplicaManager`` on the event loop."""

    def rows() -> list[console_view.Row]:
        out: list[console_view.Row] = []
        for rep in list(replicas.replicas.values()):
            log_ = rep.log
            if log_.closed:
                continue
            role = (
                "leader"
                if rep.leader is not None and rep.leader.is_leader
                else "follower"
                if rep.follower is not None
                else "none"
            )
            out.append(
                [
                    rep.topic,
                    rep.partition,
                    role,
                    log_.log_start_offset,
                    log_.log_end_offset,
                    rep.high_watermark,
                    log_.size_bytes,
                ]
            )
        return out

    return rows


def add_console_routes(app: web.Application, srv: Any, ctx: HttpContext) -> Console:
    """``srv`` is the ``api.node.broker_app.BrokerServer`` (its config, replicas)."""
    config = srv.config
    reports_dir = config.console_reports_dir
    console = Console(
        ctx,
        local_rows_of(srv.replicas),
        {v.node_id: v.url for v in config.voters},
        None if reports_dir is None else Path(reports_dir),
        admin_enabled=config.console_admin_enabled,
    )
    app[CONSOLE_KEY] = console
    r = app.router
    r.add_get("/console", index)
    r.add_get("/console/", index)
    r.add_static("/console/static/", STATIC_DIR, append_version=False)
    r.add_get("/console/api/local", local)
    r.add_get("/console/api/cluster", cluster)
    r.add_get("/console/api/topics", topics)
    r.add_get("/console/api/topics/{topic}", topic)
    r.add_get("/console/api/settings", settings)
    r.add_get("/console/api/reports", reports)
    r.add_get("/console/api/reports/{run:.+}", report)

    async def sampler(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(console.run_sampler(), name="console throughput sampler")
        yield
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await console.close()

    app.cleanup_ctx.append(sampler)
    return console
