"""A toy client call cancelled just as its answer arrives ends cancelled.

On Python 3.11 ``asyncio.wait_for`` swallows a cancellation that comes in the loop iteration
the awaited read completes. A harness interrupted with Ctrl-C cancels its workers; a worker
whose cancellation was swallowed went on sending to dead nodes until the run's time limit, so
the run did not exit (seen once in CI as ``test_ctrl_c_mid_run_cleans_up_processes_and_namespace``
timing out 30 s after SIGINT). The toy client's waits use ``asyncio.timeout``, which does not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jepsen_tests.toy.cluster import ToyClient


class _Writer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)


def test_a_call_cancelled_as_its_answer_arrives_is_cancelled() -> None:
    async def go() -> None:
        client = ToyClient("c1", "127.0.0.1", {"n1": ("127.0.0.1", 1)}, {"k0": "n1"}, timeout_s=30)
        for _ in range(20):  # each round: the answer and the cancel in one loop iteration
            reader = asyncio.StreamReader()
            writer: Any = _Writer()
            client.conns["n1"] = (reader, writer)
            task = asyncio.get_running_loop().create_task(client.send("k0", 7))
            await asyncio.sleep(0.01)
            assert not task.done() and writer.sent
            reader.feed_data(b'{"ok": true, "offset": 3, "node": "n1"}\n')
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=2)
            assert done, "the call went on after it was cancelled"
            assert task.cancelled(), task

    asyncio.run(go())
