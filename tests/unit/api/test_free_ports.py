"""``localcluster.free_ports`` never hands out a port twice in one process: a cluster asks
once per kind of listener, and a repeat put a broker's client port on another broker's
inter-broker listener (the second broker failed to bind; its readiness check reached the
first one's listener, and the test met a 404 on ``/v3/clusters``)."""

from __future__ import annotations

import socket

from api.node import localcluster


def test_a_port_the_kernel_hands_out_again_is_not_returned_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first = localcluster.free_ports(1)[0]
    # The kernel offering the same port once more, as it may right after a close.
    real_socket = socket.socket
    offers = [first]

    class Replaying(real_socket):  # type: ignore[misc,valid-type]
        def bind(self, address):  # type: ignore[no-untyped-def]
            host, _ = address
            super().bind((host, offers.pop(0) if offers else 0))

    monkeypatch.setattr(localcluster.socket, "socket", Replaying)
    ports = localcluster.free_ports(2)
    assert first not in ports
    assert len(set(ports)) == 2


def test_many_asks_in_a_row_never_repeat() -> None:
    ports = [p for _ in range(200) for p in localcluster.free_ports(3)]
    assert len(ports) == len(set(ports)) == 600
