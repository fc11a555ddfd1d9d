"""Producer ids for idempotent producers: blocks from the controller, handed out one by one.

Kafka's ``RPCProducerIdManager`` (KIP-730): a broker asks the active controller for a block
of ids (``AllocateProducerIds``; the controller records the next free id in the metadata
log, so no id is given twice across brokers or controller failovers) and answers
``InitProducerId`` from it. The next block is fetched while a tenth of the current one is
left, so a busy broker rarely waits on the controller.

``POST /internal/broker/v1/init_producer_id`` (and the client's ``/binary/v1/...``; msgpack ``{}``) ->
``{"producer_id": int, "producer_epoch": 0}``; a controller that cannot be reached or a
broker that is not registered yet gives ``{"error": "COORDINATOR_NOT_AVAILABLE", ...}``,
which clients retry. A body that is not a msgpack map is answered HTTP 400
``INVALID_REQUEST`` and spends no id.

New ids are rate-limited per broker (``producer_ids_per_second_max``, a token bucket with a
second's burst; KIP-936): past it the answer is ``THROTTLING_QUOTA_EXCEEDED`` with
``throttle_time_ms``, which the client library retries after.

A producer id is new for every session, so the epoch is always 0: Longboat has no
transactional ids yet, and with them (KIP-360) a known producer would bump its epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import msgpack
from aiohttp import web

from broker.fetcher import MSGPACK
from broker.request_fields import InvalidRequestError, body_or_raise
from metalog.client import ControllerClient, ControllerUnavailableError
from metalog.commands import AllocateProducerIds
from metalog.errors import MetadataError
from metalog.records import BrokerEpoch, BrokerId
from metalog.responses import ProducerIdsBlock

log = logging.getLogger(__name__)

PREFETCH_FRACTION = 0.1


class ProducerIdUnavailableError(Exception):
    pass


class ProducerIdThrottledError(Exception):
    """More new producer ids asked for than ``producer_ids_per_second_max`` allows (KIP-936):
    answered ``THROTTLING_QUOTA_EXCEEDED`` with how long to wait."""

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__(
            f"new producer ids are throttled for {throttle_time_ms} ms "
            "(producer_ids_per_second_max)"
        )
        self.throttle_time_ms = throttle_time_ms


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved. Pure: the caller passes the time."""

    def __init__(self, rate: float, burst: float, now_s: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at_s = burst, now_s

    def take(self, now_s: float) -> float:
        """Take one token: 0.0 if there was one, else the seconds until there will be."""
        self.tokens = min(self.burst, self.tokens + (now_s - self.at_s) * self.rate)
        self.at_s = now_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class ProducerIdManager:
    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int | None],
        controller: ControllerClient,
        *,
        ids_per_second_max: float = 1_000.0,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_id = BrokerId(broker_id)
        self.broker_epoch = broker_epoch
        self.controller = controller
        # Each producer id a client makes costs every partition it writes to a producer
        # state entry, kept until producer.id.expiration.ms: a client that asks for ids in
        # a loop would grow the brokers' memory without bound (KIP-936). The bucket bounds
        # how fast ids are handed out (a second's worth may come at once).
        self._clock_s = clock_s
        self._bucket = TokenBucket(ids_per_second_max, ids_per_second_max, clock_s())
        self.throttled = 0
        self._next = 0
        self._end = 0  # exclusive end of the current block
        self._size = 0
        self._pending: asyncio.Task[ProducerIdsBlock] | None = None
        self._queued: ProducerIdsBlock | None = None

    async def _fetch_block(self) -> ProducerIdsBlock:
        epoch = self.broker_epoch()
        if epoch is None:
            raise ProducerIdUnavailableError(f"broker {self.broker_id} is not registered yet")
        try:
            block: ProducerIdsBlock = await self.controller.execute(
                AllocateProducerIds(broker_id=self.broker_id, broker_epoch=BrokerEpoch(epoch))
            )
        except (MetadataError, ControllerUnavailableError) as e:
            raise ProducerIdUnavailableError(str(e)) from e
        log.info(
            "broker %d: producer id block [%d, %d)",
            self.broker_id,
            block.first_producer_id,
            block.first_producer_id + block.size,
        )
        return block

    def _start_prefetch(self) -> asyncio.Task[ProducerIdsBlock]:
        if self._pending is None or self._pending.done():
            self._pending = asyncio.get_running_loop().create_task(self._fetch_block())
        return self._pending

    def _adopt(self, block: ProducerIdsBlock) -> None:
        # Concurrent callers await the same fetch; only the first adopts its block.
        if block.first_producer_id >= self._end:
            self._next = block.first_producer_id
            self._end = block.first_producer_id + block.size
            self._size = block.size

    async def next_id(self) -> int:
        wait_s = self._bucket.take(self._clock_s())
        if wait_s > 0:
            self.throttled += 1
            raise ProducerIdThrottledError(max(1, int(wait_s * 1000)))
        while self._next >= self._end:
            if self._queued is not None:
                block, self._queued = self._queued, None
                self._adopt(block)
                continue
            task = self._start_prefetch()
            try:
                self._adopt(await asyncio.shield(task))
            finally:
                if task.done() and self._pending is task:
                    self._pending = None
        pid = self._next
        self._next += 1
        if (
            self._queued is None
            and self._pending is None
            and self._end - self._next < max(1, int(self._size * PREFETCH_FRACTION))
        ):
            self._prefetch_in_background()
        return pid

    def _prefetch_in_background(self) -> None:
        task = self._start_prefetch()

        def done(t: asyncio.Task[ProducerIdsBlock]) -> None:
            if self._pending is t:
                self._pending = None
            if t.cancelled():
                return
            if t.exception() is None:
                self._queued = t.result()
            else:
                log.warning(
                    "broker %d: prefetching producer ids: %s", self.broker_id, t.exception()
                )

        task.add_done_callback(done)


MANAGER_KEY: web.AppKey[ProducerIdManager] = web.AppKey("producer_ids", ProducerIdManager)


def _pack(data: dict[str, object], status: int = 200) -> web.Response:
    return web.Response(
        body=msgpack.packb(data, use_bin_type=True), content_type=MSGPACK, status=status
    )


async def _init_producer_id(request: web.Request) -> web.Response:
    try:
        # No field is read yet (no transactional ids), but the body must still be a map: a
        # client that sends something else is broken, and hears so before an id is spent.
        body_or_raise(await request.read())
    except InvalidRequestError as e:
        return _pack({"error": e.code, "message": f"{request.path}: {e}", "leader_id": -1}, 400)
    try:
        pid = await request.app[MANAGER_KEY].next_id()
    except ProducerIdUnavailableError as e:
        return _pack({"error": "COORDINATOR_NOT_AVAILABLE", "message": str(e), "leader_id": -1})
    except ProducerIdThrottledError as e:
        return _pack(
            {
                "error": "THROTTLING_QUOTA_EXCEEDED",
                "message": str(e),
                "leader_id": -1,
                "throttle_time_ms": e.throttle_time_ms,
            }
        )
    return _pack({"producer_id": pid, "producer_epoch": 0})


def add_producer_id_routes(app: web.Application, manager: ProducerIdManager) -> None:
    app[MANAGER_KEY] = manager
    app.router.add_post("/internal/broker/v1/init_producer_id", _init_producer_id)
    app.router.add_post("/binary/v1/init_producer_id", _init_producer_id)  # the client's
