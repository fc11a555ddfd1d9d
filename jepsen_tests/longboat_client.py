"""The queue workload's client for a real Longboat cluster.

INTERIM: until the Python client (``api.client``) lands, this speaks the brokers' internal
msgpack data routes directly (``POST /internal/broker/v1/produce|fetch``), with the few lines
of batch codec that needs (uncompressed batches, the layout of docs/storage-format.md). It
goes straight to the partition leader named by ``GET /v3/broker/metadata`` and marks each
produce ``forwarded`` so the broker answers it itself or refuses it: a refusal then certainly
had no effect.

How outcomes map (the history's ``fail`` means "certainly did not happen"):

* DefiniteError: the connection could not be opened (nothing was sent); the leader refused
  before appending (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, UNKNOWN_TOPIC_OR_PARTITION,
  LEADER_NOT_AVAILABLE, INVALID_REQUEST, CORRUPT_MESSAGE, ...);
* IndefiniteError: anything after the request may have reached the leader: timeouts,
  dropped connections, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, storage errors,
  any code not known to be a refusal.

The client's sockets bind its own address (127.0.0.100+), so partitions can cut clients too.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import crc32c
import msgpack

from jepsen_tests.cluster import DefiniteError, Dial, IndefiniteError

if TYPE_CHECKING:
    from jepsen_tests.longboat import LongboatCluster

MSGPACK = "application/msgpack"
HEADER = struct.Struct(">qiiBIhiqqqhii")  # docs/storage-format.md
HEADER_SIZE = HEADER.size
MAGIC = 0x4C
ATTRIBUTES_OFFSET = 21
CRC_OFFSET = 17

# Refused before the append: the write certainly did not happen.
REFUSALS = frozenset({
    "NOT_LEADER_OR_FOLLOWER", "NOT_ENOUGH_REPLICAS", "UNKNOWN_TOPIC_OR_PARTITION",
    "LEADER_NOT_AVAILABLE", "INVALID_REQUEST", "CORRUPT_MESSAGE", "MESSAGE_TOO_LARGE",
    "INVALID_RECORD", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "BROKER_NOT_AVAILABLE",
    "OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH",
})


def encode_one(value: bytes, key: bytes | None, now_ms: int) -> bytes:
    body = msgpack.packb([[0, 0, key, value, []]], use_bin_type=True)
    head = bytearray(HEADER_SIZE)
    HEADER.pack_into(head, 0, 0, HEADER_SIZE + len(body) - 12, -1, MAGIC, 0, 0, 0, now_ms,
                     now_ms, -1, -1, -1, 1)
    crc = crc32c.crc32c(body, crc32c.crc32c(bytes(head[ATTRIBUTES_OFFSET:])))
    struct.pack_into(">I", head, CRC_OFFSET, crc)
    return bytes(head) + body


def decode_batches(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a concatenation of uncompressed batches."""
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    while len(data) - pos >= HEADER_SIZE:
        (base, length, _epoch, magic, crc, attrs, _lod, _fts, _mts, _pid, _pe, _seq,
         count) = HEADER.unpack_from(data, pos)
        size = 12 + length
        if pos + size > len(data):
            break
        batch = data[pos:pos + size]
        if magic != MAGIC or crc32c.crc32c(batch[ATTRIBUTES_OFFSET:]) != crc:
            raise ValueError(f"corrupt batch at offset {base}: magic {magic}, crc mismatch")
        if attrs & 0x7:
            raise ValueError(f"batch at {base} is compressed (codec {attrs & 7}): not ours")
        recs = msgpack.unpackb(batch[HEADER_SIZE:], raw=False)
        if len(recs) != count:
            raise ValueError(f"batch at {base}: {len(recs)} records, header says {count}")
        out.extend((base + od, v) for od, _td, _k, v, _hs in recs)
        pos += size
    return out


class LongboatQueueClient:
    def __init__(self, cluster: LongboatCluster, name: str, host: str, dial: Dial,
                 timeout_s: float = 6.0, produce_timeout_ms: int = 4000) -> None:
        self.cluster = cluster
        self.name = name
        self.host = host
        self.dial = dial
        self.timeout_s = timeout_s
        self.produce_timeout_ms = produce_timeout_ms
        self.leader: dict[int, str] = {}
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=1.0),
                connector=aiohttp.TCPConnector(local_addr=(self.host, 0), limit=20))
        return self._session

    def _url(self, node: str) -> str:
        h, p = self.dial(self.name, node)
        return f"http://{h}:{p}"

    async def _refresh(self) -> None:
        for b in self.cluster.brokers:
            try:
                async with self._sess().get(self._url(b) + "/v3/broker/metadata",
                                            timeout=aiohttp.ClientTimeout(total=1.0)) as r:
                    md = await r.json()
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                continue
            table = self.cluster.partition_table(md)
            self.leader = {p: name for p, info in table.items()
                           if (name := self.cluster.by_id.get(int(info["leader"]))) is not None}
            return

    async def _leader(self, partition: int) -> str:
        if partition not in self.leader:
            await self._refresh()
        node = self.leader.get(partition)
        if node is None:
            raise DefiniteError(f"no leader known for partition {partition}")
        return node

    async def _call(self, node: str, route: str, body: dict[str, Any],
                    definite_after_send: bool) -> dict[str, Any]:
        url = f"{self._url(node)}/internal/broker/v1/{route}"
        data = msgpack.packb(body, use_bin_type=True)
        try:
            async with self._sess().post(url, data=data,
                                         headers={"Content-Type": MSGPACK}) as r:
                raw = await r.read()
                if r.status != 200:
                    raise IndefiniteError(f"{route} to {node}: HTTP {r.status} {raw[:200]!r}")
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            self.leader.clear()
            raise DefiniteError(f"{route} to {node}: connect: {e!r}") from e
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            self.leader.clear()
            err = DefiniteError if definite_after_send else IndefiniteError
            raise err(f"{route} to {node}: {type(e).__name__}: {e}") from e
        out: dict[str, Any] = msgpack.unpackb(raw, raw=False)
        return out

    async def send(self, key: str, value: int) -> tuple[int, str | None]:
        p = self.cluster.key_partition(key)
        node = await self._leader(p)
        batch = encode_one(str(value).encode(), key.encode(), int(time.time() * 1000))
        out = await self._call(node, "produce", {
            "topic": self.cluster.topic, "partition": p, "acks": -1,
            "timeout_ms": self.produce_timeout_ms, "batch": batch, "forwarded": True,
        }, definite_after_send=False)
        code = out.get("error")
        if code:
            if code in ("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                        "LEADER_NOT_AVAILABLE"):
                self.leader.pop(p, None)
            err = DefiniteError if code in REFUSALS else IndefiniteError
            raise err(f"{code} from {node}: {out.get('message')}")
        return int(out["base_offset"]), node

    async def poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        p = self.cluster.key_partition(key)
        node = await self._leader(p)
        out = await self._call(node, "fetch", {
            "topic": self.cluster.topic, "partition": p, "replica_id": -1,
            "fetch_offset": offset, "leader_epoch": -1, "last_fetched_epoch": -1,
            "max_bytes": 1 << 16, "max_wait_ms": 0, "min_bytes": 1, "high_watermark": -1,
            "broker_epoch": -1, "forwarded": True,
        }, definite_after_send=True)  # a read has no effect either way
        code = out.get("error")
        if code:
            if code in ("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION",
                        "LEADER_NOT_AVAILABLE", "FENCED_LEADER_EPOCH"):
                self.leader.pop(p, None)
            raise DefiniteError(f"{code} from {node}: {out.get('message')}")
        try:
            recs = decode_batches(bytes(out["records"]))
        except ValueError as e:
            raise DefiniteError(f"fetch from {node}: {e}") from e
        return [(o, int(v)) for o, v in recs if o >= offset and v is not None][:max_records]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
