"""``MetadataFollower``: a broker's copy of the committed metadata log, as a ``MetadataImage``.

Brokers follow the metadata log as non-voting observers, the way KRaft observers do: by
fetching committed records from the controllers (``GET /internal/controller/v1/metadata``),
without joining the Raft configuration. The loop::

    fetch(offset = image.offset + 1, max_wait_ms)   # from the active controller if known,
        -> snapshot?  batches[(base, epoch, count, records)]   high_watermark, leader_url
    delta = MetadataDelta(image); replay every record at its offset; image = delta.apply()
    publish MetadataUpdate(delta, image) to every listener, in order

* Source: the controller the last answer named as leader, else the configured ones in
  turn; on an error it moves to the next one (rotating) after a short back-off. Any
  controller's answer is committed data; a lagging one only answers less.
* A snapshot comes when the asked offset is older than what the controller retains (a
  fresh broker after the controllers' first snapshot, or one that fell far behind). Loaded
  onto an empty image it is published with a delta built from ``EMPTY`` (every topic shows
  as created); onto a non-empty image it is published with ``delta=None`` and
  ``is_snapshot=True``: listeners must reconcile against the whole image.
* Listeners are async callbacks, awaited one after the other before the next fetch is
  applied, so a listener sees every image in order and can apply back-pressure. (The replica
  manager will subscribe; ``local_changes(broker_id)`` on the delta says what it must lead,
  follow or delete.)
* Nothing is persisted: a restarted broker rebuilds its image from the controllers. KRaft
  brokers instead keep a local replica of ``__cluster_metadata`` (log segments and
  snapshots under ``metadata.log.dir``), so they can start from disk and fetch only the
  tail; our metadata is small enough to refetch, and with no local copy there is nothing to
  truncate or to diverge.

Not the place for: heartbeats, registration, fencing (``broker.lifecycle``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from common.invariant import InvariantError
from common.waits import join_task
from metalog.client import ControllerClient, ControllerUnavailableError, MetadataFetchResponse
from metalog.delta import MetadataDelta, decode_snapshot
from metalog.image import MetadataImage
from metalog.records import MetadataRecordError, decode_records

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetadataUpdate:
    """One published step: the delta that led from the previous image to ``image``."""

    delta: MetadataDelta | None
    image: MetadataImage
    is_snapshot: bool = False


Listener = Callable[[MetadataUpdate], Awaitable[None]]


class MetadataGapError(Exception):
    """A fetch answer that skips offsets: never applied (offsets are dense)."""


class MetadataFollower:
    """See the module docstring. ``start()``, ``subscribe(cb)``, read ``image``, ``stop()``."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        broker_id: int | None = None,
        max_wait_ms: int = 1_000,
        retry_backoff_s: float = 0.2,
        client: ControllerClient | None = None,
    ) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.broker_id = broker_id
        self.max_wait_ms = max_wait_ms
        self.retry_backoff_s = retry_backoff_s
        self._client = client or ControllerClient(self.urls)
        self.image = MetadataImage.EMPTY
        self.high_watermark = -1
        """The committed offset of the controller that answered last (-1: none yet)."""
        self.fetches = 0
        self.errors = 0
        self.source_url: str | None = None
        """The controller fetched from last."""
        self._leader_url: str | None = None
        self._next = 0
        self._listeners: list[Listener] = []
        self._advanced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ API

    @property
    def offset(self) -> int:
        """Offset of the last record applied (-1: none)."""
        return self.image.offset

    @property
    def caught_up(self) -> bool:
        """Whether the image holds everything the last answering controller had committed."""
        return self.high_watermark >= 0 and self.image.offset >= self.high_watermark

    def subscribe(self, listener: Listener) -> None:
        """``listener(update)`` is awaited for every new image, in order."""
        self._listeners.append(listener)

    async def wait_for_offset(self, offset: int, timeout_s: float | None = None) -> None:
        """Return once the image holds ``offset``; ``TimeoutError`` after ``timeout_s``."""

        async def wait() -> None:
            while self.image.offset < offset:
                event = self._advanced
                await event.wait()

        # Not wait_for: on 3.11 it can swallow a cancellation that comes as the wait ends.
        async with asyncio.timeout(timeout_s):
            await wait()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The follower's fetch loop, once started (the node watches it: ``common.essential``)."""
        return self._task

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metadata-follower")

    async def stop(self) -> None:
        if self._task is not None:
            await join_task(self._task, cancel=True)
            self._task = None
        await self._client.close()

    # ------------------------------------------------------------------ loop

    def _pick_url(self) -> str:
        if self._leader_url is not None:
            return self._leader_url
        url = self.urls[self._next % len(self.urls)]
        return url

    async def _run(self) -> None:
        failures = 0
        while True:
            url = self._pick_url()
            try:
                resp = await self._client.fetch_metadata(
                    url,
                    self.image.offset + 1,
                    max_wait_ms=self.max_wait_ms,
                    broker_id=self.broker_id,
                )
            except ControllerUnavailableError as e:
                self.errors += 1
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "metadata fetch from %s failed (%d in a row): %s; trying the "
                        "next controller",
                        url,
                        failures,
                        e,
                    )
                self._leader_url = None
                self._next += 1
                # Back off once every controller has failed in turn, doubling up to 2 s.
                rounds = (failures - 1) // len(self.urls)
                await asyncio.sleep(min(self.retry_backoff_s * 2**rounds, 2.0))
                continue
            if failures:
                log.info("metadata fetch from %s succeeded after %d failures", url, failures)
                failures = 0
            self.fetches += 1
            self.source_url = url
            leader = resp.leader_url.rstrip("/") if resp.leader_url else None
            if leader is None:
                # It knows no leader (an election, or it is cut off and may fall behind):
                # its data is committed but may be stale; ask another one next time.
                self._leader_url = None
                self._next += 1
            elif leader != url:
                self._leader_url = leader  # fetch from the active controller next time
            try:
                await self._apply(resp)
            except (MetadataRecordError, InvariantError, MetadataGapError) as e:
                # Committed metadata is never wrong: bad bytes mean a bug or corruption in
                # transit. Drop the answer and refetch from another controller.
                self.errors += 1
                log.error("metadata from %s does not apply: %s", url, e)
                self._leader_url = None
                self._next += 1
                await asyncio.sleep(self.retry_backoff_s)

    async def _apply(self, resp: MetadataFetchResponse) -> None:
        old = self.image
        base = old
        is_snapshot = False
        if resp.snapshot is not None and resp.snapshot_offset > old.offset:
            base = decode_snapshot(resp.snapshot)
            is_snapshot = True
            log.info("loaded a metadata snapshot at offset %d", base.offset)
        tail = MetadataDelta(base)
        last = base.offset
        for b in resp.batches:
            for i, r in enumerate(decode_records(b.data)):
                offset = b.base_offset + i
                if offset <= last:
                    continue  # already held (a batch straddling our offset)
                if offset != last + 1:
                    raise MetadataGapError(f"records jump from offset {last} to {offset}")
                tail.replay(r, offset, b.epoch)
                last = offset
        self.high_watermark = resp.high_watermark
        if last == old.offset:
            self._signal()  # nothing new, but caught_up may have changed
            return
        image = tail.apply() if last > base.offset else base
        if not is_snapshot:
            update = MetadataUpdate(tail, image)
        elif old.offset < 0:
            # From nothing: a delta from EMPTY, so listeners see every topic as created.
            delta = MetadataDelta(MetadataImage.EMPTY)
            delta.replay_all(list(image.records()), None)
            update = MetadataUpdate(delta, image, is_snapshot=True)
        else:
            update = MetadataUpdate(None, image, is_snapshot=True)
        self.image = image
        self._signal()
        for listener in list(self._listeners):
            try:
                await listener(update)
            except Exception:
                log.exception("metadata listener %r failed at offset %d", listener, image.offset)

    def _signal(self) -> None:
        self._advanced.set()
        self._advanced = asyncio.Event()
