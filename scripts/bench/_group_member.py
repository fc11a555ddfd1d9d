"""One consumer-group member process for ``scripts/bench/groups.py``.

    python _group_member.py BOOTSTRAP GROUP TOPIC STRATEGY OUT SESSION_MS HEARTBEAT_MS

Subscribes with ``AsyncGroupConsumer`` and polls; writes to OUT one line per event, with the
system-wide monotonic clock (comparable across processes on Linux):

    J <ns>              subscribed (its first join starts now)
    A <ns> <p,p,...>    partitions assigned
    V <ns> <p,p,...>    partitions revoked
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

from api.client import AsyncGroupConsumer, TopicPartition


async def main() -> None:
    bootstrap, group, topic, strategy, out_path, session_ms, heartbeat_ms = sys.argv[1:8]
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def event(kind: str, tps: set[TopicPartition]) -> None:
        out.write(
            f"{kind} {time.monotonic_ns()} {','.join(str(tp.partition) for tp in sorted(tps))}\n"
        )

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    c = AsyncGroupConsumer(
        bootstrap.split(","),
        group_id=group,
        auto_offset_reset="latest",
        session_timeout_ms=int(session_ms),
        heartbeat_interval_ms=int(heartbeat_ms),
        partition_assignment_strategy=strategy,
    )
    await c.start()
    out.write(f"J {time.monotonic_ns()} \n")
    c.subscribe(
        [topic], on_assigned=lambda tps: event("A", tps), on_revoked=lambda tps: event("V", tps)
    )
    try:
        while not stop.is_set():
            await c.poll(200)
    finally:
        await c.close()


if __name__ == "__main__":
    asyncio.run(main())
