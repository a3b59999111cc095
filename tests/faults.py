"""Broker faults a test can inject: a Redis server of its own and a TCP proxy in front of it.

A fault test never touches the shared Redis (other test runs use it): it starts ``redis-server`` on
a free port (``private_redis``), points the code under test at a ``CuttableProxy`` in front of it,
and then cuts the proxy (every open connection reset, new ones refused: what clients see when the
broker restarts or the network drops) or flushes the server's data (what they see when Redis comes
back empty).
"""
from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
import threading

from tests.services import require, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def private_redis(tmp_path):
    """A throwaway ``redis-server`` (no persistence) on a free port; yields the port."""
    server = shutil.which("redis-server")
    require(server is not None, "redis-server on PATH (a private Redis the test can flush and cut)")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _answers_ping(port) or proc.poll() is not None, 20, "the private redis-server to answer PING",
                 every=0.05)
        assert proc.poll() is None, f"redis-server exited with code {proc.returncode}"
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def redis_command(port: int, *args: str) -> bytes:
    """Send one command to the Redis on ``port`` directly (not through a proxy); its raw reply."""
    parts = [f"*{len(args)}\r\n".encode()] + [f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"".join(parts))
        return s.recv(65536)


class CuttableProxy:
    """A TCP proxy from a local port to ``target_port``, which a test can cut and restore.

    ``cut()`` closes the listening socket and resets every connection in flight, so clients see
    their broker vanish (reads fail, connects are refused) until ``restore()`` listens again on
    the same port. Threads, not asyncio: the clients under test may be other processes or other
    event loops."""

    def __init__(self, target_port: int, port: int | None = None):
        self.target_port = target_port
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.accepted = 0
        self.restore()

    def restore(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                # SO_LINGER 0: close with a reset, as a dead broker's host would answer.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    close = cut

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    client.close()
                    upstream.close()
                    return
                self._conns.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cut()
