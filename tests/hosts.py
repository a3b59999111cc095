"""Simulated hosts on one machine, for tests of work that spans hosts.

A host here is a process tree in namespaces of its own (``unshare --mount --net --uts``): its own
hostname (so its Celery workers are named ``...@<host>``), its own network with nothing but a
loopback device (it cannot reach the other host, nor the machine's PostgreSQL and Redis, over
TCP), and its own mounts: a private tmpfs over each path in ``private`` (its ``TEMPER_VAR_DIR``),
so what one host writes there the other never sees. What the hosts share is what real hosts
share: the database and the broker, reached through relays (a TCP port on the host's loopback ->
a Unix socket in the file system -> the service's real address, served by the test process), and
the paths left visible to both (the store, ``TEMPER_STORE``).

    python -m tests.hosts --name host-a --private /x/var --relay 5432=/s/pg.sock -- celery ...

runs the command as host ``host-a`` (root only: namespaces need CAP_SYS_ADMIN).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

CHUNK = 1 << 16


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _handler(connect):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await connect()
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
    return handle


class Relays:
    """TCP <-> Unix socket relays served by an event loop on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="relays", daemon=True).start()

    def _start(self, coro) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def unix_to_tcp(self, path: str, host: str, port: int) -> None:
        """Connections to the Unix socket ``path`` go to ``host:port``."""
        self._start(asyncio.start_unix_server(_handler(lambda: asyncio.open_connection(host, port)), path=path))

    def tcp_to_unix(self, port: int, path: str) -> None:
        """Connections to ``127.0.0.1:port`` go to the Unix socket ``path``."""
        self._start(asyncio.start_server(_handler(lambda: asyncio.open_unix_connection(path)), "127.0.0.1", port))


def host_command(name: str, cmd: list[str], *, private: list[Path], relays: dict[int, Path]) -> list[str]:
    """The command line that runs ``cmd`` as simulated host ``name``."""
    args = [sys.executable, "-m", "tests.hosts", "--name", name]
    for path in private:
        args += ["--private", str(path)]
    for port, path in relays.items():
        args += ["--relay", f"{port}={path}"]
    return ["unshare", "--mount", "--net", "--uts", "--fork", "--", *args, "--", *cmd]


def can_simulate_hosts() -> str:
    """Why hosts cannot be simulated here ("" when they can)."""
    if os.geteuid() != 0:
        return "simulated hosts need root (unshare --mount --net --uts)"
    probe = subprocess.run(["unshare", "--mount", "--net", "--uts", "--fork", "--", "ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"unshare/ip failed: {probe.stderr.strip()[:300]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run a command as a simulated host (inside unshare)")
    parser.add_argument("--name", required=True)
    parser.add_argument("--private", action="append", default=[], help="a path that gets a private tmpfs")
    parser.add_argument("--relay", action="append", default=[], help="PORT=UNIX_SOCKET: 127.0.0.1:PORT here -> the socket")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    socket.sethostname(args.name)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for path in args.private:
        Path(path).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", path], check=True)
    relays = Relays()
    for spec in args.relay:
        port, path = spec.split("=", 1)
        relays.tcp_to_unix(int(port), path)
    child = subprocess.Popen(cmd)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
