"""The outage proxy the object-storage tests cut (tests/storage_servers.py): a cut must end every connection through
it at once, as a dead server's host does, or a request in flight waits for the client's read timeout and the test
that cut it measures that timeout instead of the code's failure path (it made one of them flaky under the full suite's load)."""

from __future__ import annotations

import socket
import threading

from tests.storage_servers import TcpProxy


def _silent_server() -> tuple[socket.socket, list[socket.socket]]:
    """A server that accepts and reads but never answers: every request through it stays in flight."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return listener, accepted


def _ends(client: socket.socket) -> bool:
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_cut_ends_a_request_in_flight_and_refuses_new_ones_until_restored():
    listener, accepted = _silent_server()
    proxy = TcpProxy(listener.getsockname()[1])
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")  # the server reads it and never answers
        client.settimeout(0.3)
        assert not _ends(client), "the proxy must pass a live connection through"
        client.settimeout(5)
        proxy.cut()
        assert _ends(client), "a request in flight when the server went away must see its connection end"
        refused = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert _ends(refused), "while cut, a new connection is closed at once"
        proxy.restore()
        again = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        again.sendall(b"x")
        again.settimeout(0.3)
        assert not _ends(again), "restored: connections pass through again"
        for s in (client, refused, again):
            s.close()
    finally:
        proxy.close()
        listener.close()
        for conn in accepted:
            conn.close()
