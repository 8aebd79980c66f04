"""The TCP proxies of the fault tests (`delta_fabric_demo.faults`): bytes pass unchanged and in
order; `CutProxy.cut` ends the forwarded connections and refuses new ones until `restore`;
`DelayProxy` holds each chunk at least its delay and counts its stalls. Judged on bytes and lower
bounds of time only (a loaded machine only makes things later)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import closing

from delta_fabric_demo.faults import CutProxy, DelayProxy


class Echo:
    """A loopback echo server (one thread per connection, bounded by the test)."""

    def __init__(self) -> None:
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.port: int = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with closing(conn):
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                pass

    def close(self) -> None:
        self.srv.close()


def roundtrip(port: int, payload: bytes) -> bytes:
    """What comes back of ``payload`` through the proxy; a connection the proxy closes (EOF, or a
    reset when it closes with our bytes unread) gives what arrived before."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        try:
            c.sendall(payload)
            while len(got) < len(payload):
                chunk = c.recv(65536)
                if not chunk:
                    break
                got += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
    return got


def test_cut_proxy_forwards_cuts_and_restores() -> None:
    echo = Echo()
    proxy = CutProxy(echo.port)
    try:
        payload = bytes(range(256)) * 1000
        assert roundtrip(proxy.port, payload) == payload
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as c:
            c.sendall(b"x")
            assert c.recv(1) == b"x"
            proxy.cut()
            c.settimeout(30)
            try:  # the forwarded connection ended: EOF, or a reset
                assert c.recv(1) == b""
            except ConnectionResetError:
                pass
        assert roundtrip(proxy.port, b"refused") == b""  # new connections closed at once
        assert proxy.refused >= 1
        proxy.restore()
        assert roundtrip(proxy.port, b"back") == b"back"
    finally:
        proxy.close()
        echo.close()


def test_delay_proxy_holds_each_chunk_and_counts_stalls() -> None:
    echo = Echo()
    proxy = DelayProxy(echo.port, delay_s=0.05, stall_rate=1.0, stall_s=0.05, seed=1)
    try:
        payload = bytes(range(256)) * 400
        t0 = time.monotonic()
        assert roundtrip(proxy.port, payload) == payload  # unchanged, in order
        # two directions, each at least delay + stall (every chunk stalls at rate 1)
        assert time.monotonic() - t0 >= 2 * (0.05 + 0.05)
        assert proxy.stalls >= 2
    finally:
        proxy.close()
        echo.close()
