"""A client of the controller quorum: sends commands to the active controller.

Any voter's URL will do as a start: a node that is not the active controller answers 421
with the leader's URL, and the client retries there; while there is no leader (an election)
it retries with a short back-off until ``timeout_s``. Used by brokers, the HTTP API and the
CLI.

It lives in ``metalog`` (not ``api``) because brokers use it and may not import ``api``.
``fetch_metadata`` is the observers' read of the committed metadata log
(``GET /internal/controller/v1/metadata``), answered by any controller, not only the active
one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgpack

from common import netbind
from metalog import wire
from metalog.errors import MetadataError

MSGPACK = "application/x-msgpack"


class ControllerUnavailableError(Exception):
    """No active controller answered within the time budget."""


@dataclass(frozen=True)
class MetadataBatch:
    """One committed Raft entry's records: ``encode_records`` bytes, the first at ``base_offset``."""

    base_offset: int
    epoch: int
    count: int
    data: bytes


@dataclass(frozen=True)
class MetadataFetchResponse:
    """A controller's answer to a metadata fetch (see ``ControllerService.fetch_metadata``).

    ``snapshot`` (``encode_snapshot`` bytes, standing for offsets ``<= snapshot_offset``) is
    set when the asked offset is older than what the controller retains; ``batches`` follow
    it (or the asked offset) in order. ``high_watermark`` is the controller's committed
    metadata offset when it answered; ``leader_url`` the active controller as it knows it.
    """

    node_id: int
    high_watermark: int
    batches: tuple[MetadataBatch, ...]
    snapshot: bytes | None = None
    snapshot_offset: int = -1
    leader_url: str | None = None

    def to_msgpack(self) -> bytes:
        packed: bytes = msgpack.packb(
            {
                "node_id": self.node_id,
                "high_watermark": self.high_watermark,
                "batches": [[b.base_offset, b.epoch, b.count, b.data] for b in self.batches],
                "snapshot": self.snapshot,
                "snapshot_offset": self.snapshot_offset,
                "leader_url": self.leader_url,
            },
            use_bin_type=True,
        )
        return packed

    @classmethod
    def from_msgpack(cls, data: bytes) -> MetadataFetchResponse:
        try:
            d = msgpack.unpackb(data, raw=False)
            return cls(
                node_id=int(d["node_id"]),
                high_watermark=int(d["high_watermark"]),
                batches=tuple(
                    MetadataBatch(int(b), int(e), int(n), bytes(x)) for b, e, n, x in d["batches"]
                ),
                snapshot=d.get("snapshot"),
                snapshot_offset=int(d.get("snapshot_offset", -1)),
                leader_url=d.get("leader_url"),
            )
        except Exception as e:
            raise ControllerUnavailableError(f"bad metadata fetch response: {e}") from None


class ControllerClient:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout_s: float = 15.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if not urls:
            raise ValueError("ControllerClient needs at least one controller URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout_s = timeout_s
        self._session = session
        self._own_session = session is None
        self._leader_url: str | None = None

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=5), connector=netbind.connector()
            )
        return self._session

    async def execute(self, command: Any) -> Any:
        """The command's response; raises its ``MetadataError`` or ``ControllerUnavailableError``."""
        body = wire.dumps(command)
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        last_error = "no controller tried"
        # Whether an earlier attempt may have been applied (sent, then no answer): a refusal
        # on a retry may then be the first attempt's own effect (a delete that finds its
        # topic gone). Callers read it from the raised error's ``after_uncertain_attempt``.
        uncertain = False
        while time.monotonic() < deadline:
            url = self._leader_url or self.urls[attempt % len(self.urls)]
            attempt += 1
            try:
                async with self._sess().post(
                    f"{url}/internal/controller/v1/command",
                    data=body,
                    headers={"Content-Type": MSGPACK},
                ) as resp:
                    payload = await resp.read()
                    if resp.status == 421:
                        info = await resp.json(content_type=None)
                        if info.get("maybe_applied"):
                            uncertain = True  # proposed, then leadership was lost
                        leader_url = info.get("leader_url")
                        self._leader_url = leader_url if leader_url and leader_url != url else None
                        last_error = info.get("message", "not the controller")
                        if self._leader_url is None:
                            await asyncio.sleep(min(0.05 * attempt, 0.5))
                        continue
                    if resp.status != 200:
                        raise ControllerUnavailableError(
                            f"{url} answered HTTP {resp.status}: {payload[:200]!r}"
                        )
                    result = wire.loads(payload)
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                self._leader_url = None
                last_error = f"{url}: {str(e) or type(e).__name__}"
                if not isinstance(e, aiohttp.ClientConnectorError):
                    uncertain = True  # connected, maybe sent: the outcome is unknown
                await asyncio.sleep(min(0.05 * attempt, 0.5))
                continue
            self._leader_url = url
            if "error" in result:
                err = result["error"]
                if not isinstance(err, MetadataError):
                    err = MetadataError(str(err))
                err.after_uncertain_attempt = uncertain
                raise err
            return result["ok"]
        raise ControllerUnavailableError(
            f"no active controller answered within {self.timeout_s:.0f} s ({last_error})"
        )

    async def get_json(self, path: str, url: str | None = None) -> Any:
        """GET ``path`` from ``url`` (or the first controller that answers)."""
        errors = []
        for u in [url] if url else self.urls:
            try:
                async with self._sess().get(f"{u}{path}") as resp:
                    resp.raise_for_status()
                    return await resp.json()
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                errors.append(f"{u}: {str(e) or type(e).__name__}")
        raise ControllerUnavailableError("; ".join(errors))

    async def fetch_metadata(
        self, url: str, offset: int, *, max_wait_ms: int = 500, broker_id: int | None = None
    ) -> MetadataFetchResponse:
        """Committed metadata from offset ``offset`` on, from the controller at ``url`` (any
        controller answers; none is retried here: the caller picks the next one on
        ``ControllerUnavailableError``). Long-polls up to ``max_wait_ms`` when there is
        nothing new."""
        params = {"offset": str(offset), "max_wait_ms": str(max_wait_ms)}
        if broker_id is not None:
            params["broker_id"] = str(broker_id)
        timeout = aiohttp.ClientTimeout(total=max_wait_ms / 1000 + 5)
        try:
            async with self._sess().get(
                f"{url.rstrip('/')}/internal/controller/v1/metadata", params=params, timeout=timeout
            ) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    raise ControllerUnavailableError(
                        f"{url} answered HTTP {resp.status}: {payload[:200]!r}"
                    )
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise ControllerUnavailableError(f"{url}: {str(e) or type(e).__name__}") from None
        return MetadataFetchResponse.from_msgpack(payload)
