"""Node-to-node Raft transport over the node's own aiohttp server.

Owns: one bounded outbound queue and one sender task per peer, the keep-alive
``aiohttp.ClientSession`` they share, and the internal route that receives messages.
Does not own: the meaning of a message. Messages are the core's wire dicts
(``Message.to_wire()``); they travel as msgpack and are handed, still as dicts, to the
``on_messages`` callback, which belongs to the node task.

Wire format of ``POST /internal/raft/v1/messages`` (``application/x-msgpack``)::

    {"from": <node id>, "msgs": [<wire dict>, ...]}        -> 204 No Content

A body that is not such a map (``from`` an int in [1, NODE_ID_MAX], ``msgs`` a list of at
most ``post_messages_max``), or whose messages ``on_messages`` refuses, is answered 400 with
the reason as text; a body over ``body_bytes_max`` 413.

Rules:

* ``send(to, msg)`` never blocks and never raises: it appends to the peer's queue and wakes
  its sender. A full queue drops the message (Raft tolerates loss: heartbeats and
  retransmission repair it), and so does an unknown peer.
* Each sender drains everything queued (up to ``batch_messages_max`` messages, or until the
  body passes ``post_bytes_target``) into one POST, so
  the number of requests per second stays bounded however many messages the core emits; a
  message queued while a POST is in flight goes out in the next one.
* On an error the batch in hand is dropped and the sender backs off exponentially
  (``backoff_ms_min`` .. ``backoff_ms_max``) before the next attempt; while it backs off,
  newer messages replace older ones (the queue keeps the newest ``queue_messages_max``), as
  a stale AppendEntries is worth less than a fresh one.
* A failed POST is reported through ``on_unreachable(peer_id)`` (the node tells the core,
  which stops streaming appends to that peer and probes instead).
* ``close()`` cancels the senders and closes the session; the route stays on the app,
  whose owner stops the server, and answers 503 once closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import msgpack
from aiohttp import web

from common import netbind
from raft.types import NODE_ID_MAX

log = logging.getLogger(__name__)

ROUTE = "/internal/raft/v1/messages"
CONTENT_TYPE = "application/x-msgpack"

WireMessage = dict[str, Any]
OnMessages = Callable[[int, list[Any]], None]
"""Called on the event loop with ``(from_node_id, messages)`` for each inbound POST; the
messages are as the sender packed them, unchecked. Raises ``ValueError`` to refuse the POST
(answered 400 with its text) having queued none of them."""


class _Peer:
    """Outbound state for one peer: its URL, queue, wake-up event and sender task."""

    __slots__ = ("backoff_s", "dropped", "queue", "sent", "task", "url", "wake")

    def __init__(self, url: str, queue_max: int) -> None:
        self.url = url.rstrip("/") + ROUTE
        self.queue: collections.deque[WireMessage] = collections.deque(maxlen=queue_max)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.backoff_s = 0.0
        self.dropped = 0
        self.sent = 0


class RaftTransport:
    """Sends the core's messages to peers and receives theirs; see the module docstring."""

    def __init__(
        self,
        node_id: int,
        peers: Mapping[int, str],
        on_messages: OnMessages,
        *,
        queue_messages_max: int = 4096,
        batch_messages_max: int = 1024,
        post_bytes_target: int = 8 << 20,
        body_bytes_max: int = 256 << 20,
        post_messages_max: int = 16_384,
        request_timeout_ms: int = 2000,
        backoff_ms_min: int = 20,
        backoff_ms_max: int = 1000,
        on_unreachable: Callable[[int], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self._on_messages = on_messages
        self._on_unreachable = on_unreachable
        self._queue_max = queue_messages_max
        self._batch_max = batch_messages_max
        self._post_bytes = post_bytes_target
        self._body_max = body_bytes_max
        self._post_messages_max = post_messages_max
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_ms / 1000)
        self._backoff_min_s = backoff_ms_min / 1000
        self._backoff_max_s = backoff_ms_max / 1000
        self._peers: dict[int, _Peer] = {}
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        for peer_id, url in peers.items():
            self.set_peer(peer_id, url)

    # ------------------------------------------------------------------ receiving

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(ROUTE, self._handle_messages)

    async def _handle_messages(self, request: web.Request) -> web.Response:
        if self._closed:
            return web.Response(status=503)
        # Read the stream ourselves: the app's client_max_size (1 MiB by default) is for
        # client requests; one POST here may carry several MiB of entries.
        if request.content_length is not None and request.content_length > self._body_max:
            return web.Response(status=413, text=f"raft body over {self._body_max} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await request.content.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > self._body_max:
                return web.Response(status=413, text=f"raft body over {self._body_max} bytes")
        body = b"".join(chunks)
        try:
            sender, msgs = self._envelope(body)
            self._on_messages(sender, msgs)
        except ValueError as e:
            # Refused as a whole, nothing queued: the sender's bug or not a node at all.
            log.warning("raft node %s: refused a POST: %s", self.node_id, e)
            return web.Response(status=400, text=f"bad raft message body: {e}")
        return web.Response(status=204)

    def _envelope(self, body: bytes) -> tuple[int, list[WireMessage]]:
        """``(from, msgs)`` of a POST body, or ``ValueError`` saying what is wrong."""
        try:
            payload = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except Exception as e:  # msgpack raises several types (ExtraData, FormatError, ...)
            raise ValueError(f"not msgpack ({type(e).__name__}: {e})") from None
        if type(payload) is not dict:
            raise ValueError(f"expected a map {{from, msgs}}, got {type(payload).__name__}")
        sender, msgs = payload.get("from"), payload.get("msgs")
        if type(sender) is not int or not 0 < sender <= NODE_ID_MAX:
            raise ValueError(f"'from' must be a node id in [1, {NODE_ID_MAX}], got {sender!r:.40}")
        if type(msgs) is not list:
            raise ValueError(f"'msgs' must be a list, got {type(msgs).__name__}")
        if len(msgs) > self._post_messages_max:
            raise ValueError(f"{len(msgs)} messages in one POST, over {self._post_messages_max}")
        return sender, msgs

    # ------------------------------------------------------------------ sending

    def set_peer(self, peer_id: int, url: str) -> None:
        """Add a peer or change its URL (membership changes go through here)."""
        if peer_id == self.node_id:
            return
        peer = self._peers.get(peer_id)
        if peer is not None:
            peer.url = url.rstrip("/") + ROUTE
            return
        self._peers[peer_id] = _Peer(url, self._queue_max)

    def remove_peer(self, peer_id: int) -> None:
        peer = self._peers.pop(peer_id, None)
        if peer is not None and peer.task is not None:
            peer.task.cancel()

    def peer_url(self, peer_id: int) -> str | None:
        peer = self._peers.get(peer_id)
        return None if peer is None else peer.url[: -len(ROUTE)]

    def send(self, to: int, msg: WireMessage) -> None:
        """Queue ``msg`` for ``to``; never blocks, drops on overflow or unknown peer."""
        peer = self._peers.get(to)
        if peer is None or self._closed:
            return
        if len(peer.queue) == peer.queue.maxlen:
            peer.dropped += 1  # deque(maxlen) drops the oldest
        peer.queue.append(msg)
        if peer.task is None:
            peer.task = asyncio.get_running_loop().create_task(
                self._sender(to, peer), name=f"raft-send-{self.node_id}->{to}"
            )
        peer.wake.set()

    def stats(self) -> dict[int, dict[str, int]]:
        return {
            pid: {"queued": len(p.queue), "sent": p.sent, "dropped": p.dropped}
            for pid, p in self._peers.items()
        }

    def _session_or_open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=netbind.connector(limit_per_host=2, keepalive_timeout=60),
            )
        return self._session

    async def _sender(self, peer_id: int, peer: _Peer) -> None:
        packer = msgpack.Packer(use_bin_type=True)
        while not self._closed:
            await peer.wake.wait()
            peer.wake.clear()
            while peer.queue and not self._closed:
                # Pack message by message until the POST is big enough; the body is the
                # map {"from": id, "msgs": [...]} assembled from the packed parts.
                parts: list[bytes] = []
                size = 0
                while peer.queue and len(parts) < self._batch_max and size < self._post_bytes:
                    part = packer.pack(peer.queue.popleft())
                    parts.append(part)
                    size += len(part)
                n = len(parts)
                body = b"".join(
                    [
                        packer.pack_map_header(2),
                        packer.pack("from"),
                        packer.pack(self.node_id),
                        packer.pack("msgs"),
                        packer.pack_array_header(n),
                        *parts,
                    ]
                )
                try:
                    session = self._session_or_open()
                    async with session.post(
                        peer.url, data=body, headers={"Content-Type": CONTENT_TYPE}
                    ) as resp:
                        if resp.status >= 300:
                            raise aiohttp.ClientResponseError(
                                resp.request_info, (), status=resp.status
                            )
                    peer.sent += n
                    peer.backoff_s = 0.0
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    peer.dropped += n
                    if self._on_unreachable is not None:
                        self._on_unreachable(peer_id)
                    peer.backoff_s = min(
                        self._backoff_max_s, max(self._backoff_min_s, peer.backoff_s * 2)
                    )
                    log.debug(
                        "raft %s -> %s: dropped %d message(s) (%s); backing off %.0f ms",
                        self.node_id,
                        peer_id,
                        n,
                        e,
                        peer.backoff_s * 1000,
                    )
                    await asyncio.sleep(peer.backoff_s)

    async def close(self) -> None:
        self._closed = True
        tasks = [p.task for p in self._peers.values() if p.task is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._session is not None:
            await self._session.close()
            self._session = None
