"""What the public HTTP routes share: the broker's collaborators, small lookups, request helpers.

``HttpContext`` holds the broker's metadata follower (its ``MetadataImage``), the
``PartitionRouter`` (produce, fetch and ListOffsets for any partition), the ``ProduceLanes``
that make the batches ``api.http.produce`` builds idempotent, a ``ControllerClient`` for topic
administration, the cluster id, the metrics, and the limits. Routes find it under
``CONTEXT_KEY``. It is a container with small lookups (a topic or 404, the next sticky
partition, a partition's offset for a time, waits on the image): the routes and ``api.http.produce`` use its collaborators,
and it calls nothing in them.

The cluster id: the broker's configured ``cluster_id`` if set, else one derived from the
controller quorum every node of a cluster is configured with (``cluster_id_for``), so all
brokers of a cluster agree on it without any metadata record to carry it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from api.http.embedded import EmbeddedCodec
from api.http.errors import (
    HttpError,
    bad_request,
    cluster_not_found,
    kafka_error,
    partition_not_found,
)
from api.http.errors import topic_not_found as _topic_not_found
from api.http.metrics import BrokerMetrics
from broker.produce_lanes import ProduceLanes
from broker.replica_manager import ReplicaError
from broker.router import PartitionRouter
from metalog.client import ControllerClient, ControllerUnavailableError
from metalog.image import MetadataImage, PartitionRegistration, TopicImage

JSON = "application/json"
MSGPACK_TYPES = frozenset(
    {"application/msgpack", "application/x-msgpack", "application/vnd.longboat.batch+msgpack"}
)
MSGPACK = "application/msgpack"

BODY_READ_TIMEOUT_S = 30.0
"""A client that does not send its (non-streaming) body within this is cut off."""


def cluster_id_for(configured: str | None, controller_quorum: list[tuple[int, str]]) -> str:
    """``configured``, else 22 URL-safe base64 characters of a hash of the voter set
    (``node_id@host:port``, sorted), the shape of Kafka's cluster ids."""
    if configured:
        return configured
    spec = ",".join(f"{i}@{a}" for i, a in sorted(controller_quorum))
    digest = hashlib.blake2b(f"longboat-cluster:{spec}".encode(), digest_size=16).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass
class HttpContext:
    broker_id: int
    cluster_id: str
    image_fn: Callable[[], MetadataImage]
    router: PartitionRouter
    controllers: ControllerClient
    metrics: BrokerMetrics
    ready_fn: Callable[[], bool] = lambda: True
    lanes: ProduceLanes | None = None
    """None: the batches built here go without producer ids (at least once)."""
    record_bytes_max: int = 8 << 20
    """A streamed record larger than this (in JSON) fails, so a stream cannot grow a buffer."""
    batch_entries_max: int = 10_000
    stream_idle_s_max: float = 60.0
    """A produce stream that sends nothing for this long is ended."""
    embedded: EmbeddedCodec | None = None
    """The schema formats' codec (None: no registry on this node; they are refused)."""
    _rr: dict[str, int] = field(default_factory=dict)

    @property
    def image(self) -> MetadataImage:
        return self.image_fn()

    def check_cluster(self, request: web.Request) -> None:
        cid = request.match_info.get("cluster_id")
        if cid is not None and cid != self.cluster_id:
            raise cluster_not_found(cid)

    def topic_or_404(self, name: str) -> TopicImage:
        t = self.image.topics.get(name)
        if t is None:
            raise _topic_not_found(name)
        return t

    def partition_or_404(self, topic: str, partition: int) -> PartitionRegistration:
        t = self.topic_or_404(topic)
        reg = t.partitions.get(partition)
        if reg is None:
            raise partition_not_found(topic, partition)
        return reg

    def next_sticky_partition(self, topic: str, count: int) -> int:
        """Keyless records of one request go to one partition; requests rotate."""
        n = self._rr.get(topic, -1) + 1
        self._rr[topic] = n
        return n % count

    async def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        isolation_level: str = "read_uncommitted",
    ) -> int:
        """The partition's offset for ``timestamp`` (-2 earliest, -1 latest: the last stable
        offset at ``read_committed``), from its leader."""
        try:
            ans = await self.router.list_offsets(
                topic, partition, timestamp, isolation_level=isolation_level
            )
        except ReplicaError as e:
            raise kafka_error(e.error_code, str(e)) from None
        return int(ans["offset"])

    async def sync_metadata(self, timeout_s: float = 3.0) -> None:
        """Wait until this broker's image has applied everything the active controller had
        applied when asked (a read index, as Raft's linearizable reads): an admin read after
        an admin write that another broker answered then sees that write.

        Strict: with no active controller reachable, or this broker's image not there within
        ``timeout_s``, the read is refused (503) rather than answered from an image that may
        be stale: under a network partition a cut-off broker would otherwise describe a topic
        deleted a moment ago (found by the metadata workload of jepsen_tests)."""
        try:
            st = await self.controllers.get_json("/v3/quorum/status")
            if st.get("role") != "leader" and st.get("leader_url"):
                st = await self.controllers.get_json("/v3/quorum/status", url=str(st["leader_url"]))
            if st.get("role") != "leader":
                raise ControllerUnavailableError("no node answered as the active controller")
            target = int(st["metadata_offset"])
        except (ControllerUnavailableError, ValueError, TypeError, KeyError) as e:
            raise HttpError(
                503, f"Cannot confirm this broker's metadata is current: {e}", 50302
            ) from None
        if not await self.wait_image(lambda im: im.offset >= target, timeout_s):
            raise HttpError(
                503,
                f"This broker's metadata has not reached the controller's "
                f"offset {target} within {timeout_s:.0f} s.",
                50302,
            )

    async def wait_image(self, cond: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait until this broker's image satisfies ``cond`` (after an admin change)."""
        deadline = time.monotonic() + timeout_s
        while not cond(self.image):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


CONTEXT_KEY: web.AppKey[HttpContext] = web.AppKey("http_context", HttpContext)


def ctx_of(request: web.Request) -> HttpContext:
    ctx = request.app[CONTEXT_KEY]
    ctx.check_cluster(request)
    return ctx


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=JSON)


def media_type(request: web.Request) -> str:
    """The Content-Type without parameters (``; charset=utf-8`` must not change the
    meaning: kafka-rest#1100), lower case; '' when absent."""
    return request.headers.get("Content-Type", "").split(";")[0].strip().lower()


async def read_body(request: web.Request) -> bytes:
    try:
        # Not wait_for: on 3.11 it can swallow a cancellation that comes as the read ends.
        async with asyncio.timeout(BODY_READ_TIMEOUT_S):
            return await request.read()
    except TimeoutError:
        raise HttpError(408, "Request body not received in time.", 408) from None


async def json_body(request: web.Request, *, required: bool = True) -> Any:
    raw = await read_body(request)
    if not raw.strip():
        if required:
            raise HttpError(422, "Request body is empty. Data is required.", 42206)
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"Malformed JSON: {e}") from None


def int_param(
    request: web.Request,
    name: str,
    default: int | None = None,
    *,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    v = request.query.get(name)
    if v is None:
        if default is None:
            raise bad_request(f"Query parameter '{name}' is required.")
        return default
    try:
        n = int(v)
    except ValueError:
        raise bad_request(f"Query parameter '{name}' must be an integer, got {v!r}.") from None
    if lo is not None and n < lo:
        raise bad_request(f"Query parameter '{name}' must be >= {lo}.")
    if hi is not None and n > hi:
        raise bad_request(f"Query parameter '{name}' must be <= {hi}.")
    return n


def path_int(request: web.Request, name: str) -> int:
    v = request.match_info[name]
    try:
        n = int(v)
    except ValueError:
        raise bad_request(f"'{name}' must be an integer, got {v!r}.") from None
    if n < 0:
        raise bad_request(f"'{name}' must be >= 0.")
    return n


def parse_acks(request: web.Request, default: str = "all") -> int:
    v = request.query.get("acks", default).lower()
    acks = {"all": -1, "-1": -1, "1": 1, "0": 0, "leader": 1, "none": 0}.get(v)
    if acks is None:
        raise bad_request(f"acks must be all, 1 or 0, got {v!r}.")
    return acks


def base_url(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"
