"""``longboat dev up``'s free-port check ignores TIME_WAIT, as the nodes' own bind does."""

from __future__ import annotations

import socket

from common.netbind import port_free


def test_a_port_left_in_time_wait_by_a_closed_connection_counts_as_free() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the connection enters TIME_WAIT
    client.close()
    server.close()
    assert port_free("127.0.0.1", port)


def test_a_port_someone_listens_on_is_not_free() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not port_free("127.0.0.1", server.getsockname()[1])


def test_wait_for_counts_an_oserror_as_not_yet() -> None:
    import pytest

    from api.node.localcluster import wait_for

    calls = []

    def refused() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("not listening yet")
        return True

    assert wait_for("a listener", refused, 5, interval_s=0.01) is True and len(calls) == 3
    with pytest.raises(AssertionError, match="never: not within"):
        wait_for("never", lambda: (_ for _ in ()).throw(OSError("down")), 0.05, interval_s=0.01)
