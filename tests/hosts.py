"""Simulated hosts on one machine, for tests of work that spans hosts.

A host here is a process tree in namespaces of its own (``unshare --mount --net --uts``): its own
hostname (so its Celery workers are named ``...@<host>``), its own network with nothing but a
loopback device (it cannot reach the other host, nor the machine's PostgreSQL and Redis, over
TCP), and its own mounts: a private tmpfs over each path in ``private`` (its ``TEMPER_VAR_DIR``),
so what one host writes there the other never sees. What the hosts share is what real hosts
share: the database and the broker, reached through relays (a TCP port on the host's loopback ->
a Unix socket in the file system -> the service's real address, served by the test process), and
the paths left visible to both (the store, ``TEMPER_STORE``).

Hosts that must reach each other (a run's ranks spread over them) share a :class:`Network`: a
bridge on the machine with no address of its own, and a network namespace per host joined to it
by a veth pair, so host ``i`` is at ``10.77.0.<i>`` and its name resolves to that address on
every host of the network (each gets its own ``/etc/hosts``), and still nothing else is reachable.

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
from dataclasses import dataclass
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


class Network:
    """Simulated hosts that reach each other: a bridge here and one named network namespace per
    host, joined by a veth pair (the names carry this process's id, so tests in parallel never
    share one). :meth:`close` removes them."""

    SUBNET = "10.77.0"

    def __init__(self, directory: Path) -> None:
        self.tag = str(os.getpid() % 100_000)
        self.bridge = f"tb{self.tag}"
        self.directory = Path(directory)
        self.hosts: dict[str, tuple[str, str]] = {}  # name -> (namespace, address)
        self.links: list[str] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> str:
        """A host ``name`` on the network; returns its address."""
        index = len(self.hosts) + 1
        namespace, outside, inside = f"temper-{self.tag}-{name}", f"tv{self.tag}x{index}", f"tv{self.tag}y{index}"
        address = f"{self.SUBNET}.{index}"
        _ip("netns", "add", namespace)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("link", "set", inside, "netns", namespace)
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        self.hosts[name] = (namespace, address)
        self.links.append(outside)
        return address

    def etc_hosts(self) -> Path:
        """The ``/etc/hosts`` every host of the network gets: localhost and each host's address."""
        path = self.directory / "etc-hosts"
        path.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, (_, a) in self.hosts.items()))
        return path

    def namespace(self, name: str) -> str:
        return self.hosts[name][0]

    def close(self) -> None:
        for link in self.links:
            subprocess.run(["ip", "link", "delete", link], capture_output=True)
        for namespace, _ in self.hosts.values():
            subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def relay_services(directory: Path, db: dict, redis_url: str) -> tuple[Relays, dict[int, Path], dict[str, str]]:
    """The machine's side of the hosts' way to PostgreSQL (``db``: Django's settings of it) and
    Redis: a Unix socket each under ``directory`` relayed to the real service. Returns the relays
    (keep them alive), each host's loopback port -> socket (``host_command``'s ``relays``) and the
    ``DATABASE_URL`` and ``REDIS_URL`` a host's processes use (its own loopback)."""
    from urllib.parse import urlparse

    pg_port, redis = int(db["PORT"] or 5432), urlparse(redis_url)
    sockets = Path(directory) / "s"
    sockets.mkdir(parents=True, exist_ok=True)
    relay = Relays()
    relay.unix_to_tcp(str(sockets / "pg"), db["HOST"] or "127.0.0.1", pg_port)
    relay.unix_to_tcp(str(sockets / "redis"), redis.hostname or "127.0.0.1", redis.port or 6379)
    env = {"DATABASE_URL": f"postgresql://{db['USER']}@127.0.0.1:{pg_port}/{db['NAME']}",
           "REDIS_URL": f"redis://127.0.0.1:{redis.port or 6379}{redis.path or ''}"}
    return relay, {pg_port: sockets / "pg", redis.port or 6379: sockets / "redis"}, env


@dataclass
class HostServices:
    """What a test of simulated hosts starts them with (``host_services``)."""

    env: dict[str, str]
    """A host worker's environment: the test's database and Redis through the host's loopback."""
    relays: dict[int, Path]
    """Each host's loopback port -> socket (``start_host_worker``'s ``relays``)."""
    store: Path
    """The store every host sees (``TEMPER_STORE``)."""
    relay: Relays
    """The machine's side of the relays: alive as long as this object is."""


def host_services(directory: Path, settings, **env: str) -> HostServices:
    """For a test of simulated hosts: PostgreSQL, Redis and the namespaces required (else skipped,
    or failed under TEMPER_REQUIRE_SERVICES=1), relays from the hosts to both, the store at
    ``directory/store`` (also the test's ``settings.TEMPER_STORE``) and the hosts' environment,
    ``TEMPER_VAR_DIR`` at ``directory/var`` plus ``env``."""
    from django.db import connection

    from tests.services import require, require_postgres, require_redis, worker_env

    require_postgres()
    redis_url = require_redis()
    why = can_simulate_hosts()
    require(not why, why)
    db = connection.settings_dict
    relay, relays, host_urls = relay_services(directory, db, redis_url)
    store = Path(directory) / "store"
    settings.TEMPER_STORE = str(store)
    worker = worker_env(db, redis_url, TEMPER_VAR_DIR=str(Path(directory) / "var"), TEMPER_STORE=str(store), **env)
    worker.update(host_urls)  # the hosts reach both through their own loopback
    return HostServices(env=worker, relays=relays, store=store, relay=relay)


def host_command(name: str, cmd: list[str], *, private: list[Path], relays: dict[int, Path],
                 network: Network | None = None) -> list[str]:
    """The command line that runs ``cmd`` as simulated host ``name`` (on ``network`` when given:
    its namespace there and the network's ``/etc/hosts``; else a network of its own)."""
    args = [sys.executable, "-m", "tests.hosts", "--name", name]
    for path in private:
        args += ["--private", str(path)]
    for port, path in relays.items():
        args += ["--relay", f"{port}={path}"]
    if network is None:
        return ["unshare", "--mount", "--net", "--uts", "--fork", "--", *args, "--", *cmd]
    args += ["--etc-hosts", str(network.etc_hosts())]
    return ["ip", "netns", "exec", network.namespace(name), "unshare", "--mount", "--uts", "--fork", "--", *args, "--", *cmd]


def start_host_worker(name: str, directory: Path, env: dict, relays: dict[int, Path], *, queues: str, worker: str,
                      network: Network | None = None):
    """A Celery worker (``worker``, serving ``queues``) as simulated host ``name``, its private
    ``TEMPER_VAR_DIR`` under ``directory`` and its log in ``directory/<name>.log``; returned once ready."""
    from tests.services import start_celery_process  # lazy: tests.services sets Django up; `python -m tests.hosts` does not

    cmd = [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queues, "-c", "2",
           "-n", f"{worker}-{os.getpid()}@%h", "--without-mingle", "--without-gossip", "-l", "info"]
    return start_celery_process(host_command(name, cmd, private=[Path(directory) / "var"], relays=relays, network=network),
                                env, name, log_path=Path(directory) / f"{name}.log")


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
    parser.add_argument("--etc-hosts", default="", help="a file mounted over /etc/hosts")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    socket.sethostname(args.name)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if args.etc_hosts:
        subprocess.run(["mount", "--bind", args.etc_hosts, "/etc/hosts"], check=True)
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
