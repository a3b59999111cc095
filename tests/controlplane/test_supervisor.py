"""Supervised processes come back: the Supervisor the demo and ``manage.py supervise`` run their
workers under starts a process again after it exits, with backoff and a log line; a Celery worker
killed with SIGKILL is replaced by a new one that serves tasks."""
from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from celery import Celery
from django.db import connection

from controlplane.web.supervisor import Supervisor
from tests.faults import private_redis
from tests.services import require_postgres, wait_for, worker_env

ROOT = Path(__file__).resolve().parents[2]


def test_an_exiting_process_is_restarted_with_growing_backoff_and_a_log_line(tmp_path):
    lines: list[str] = []
    supervisor = Supervisor(log=lines.append, cwd=tmp_path, backoff_first_s=0.05, backoff_max_s=0.2)
    child = supervisor.add("flaky", [sys.executable, "-c", "import sys; sys.exit(3)"], log_path=tmp_path / "flaky.log")
    try:
        def restarted_four_times():
            supervisor.poll()
            return child.restarts >= 4
        wait_for(restarted_four_times, 30, "four restarts", every=0.05)
    finally:
        supervisor.stop()
    exits = [line for line in lines if "exited" in line]
    assert exits[0].startswith(f"flaky (pid {child.pids[0]}) exited with code 3; restarting in 0.05 s")
    assert [re.search(r"restarting in (\S+) s", line).group(1) for line in exits[:4]] == ["0.05", "0.1", "0.2", "0.2"]
    assert len(set(child.pids)) == len(child.pids) >= 5
    assert any(line.startswith(f"flaky restarted (pid {child.pids[1]}, restart 1)") for line in lines)


def test_children_end_with_a_supervisor_killed_by_sigkill(tmp_path):
    """A child runs in a session of its own (out of the terminal's signals), so it is the kernel's
    parent-death signal that ends it when its supervisor is killed outright."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from controlplane.web.supervisor import Supervisor\n"
        "s = Supervisor(log=print)\n"
        f"c = s.add('sleeper', [sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"Path({str(pid_file)!r}).write_text(str(c.proc.pid))\n"
        "time.sleep(600)\n"
    )
    supervisor = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 60, "the child's pid", every=0.05))
        supervisor.kill()
        supervisor.wait()

        def gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            # a zombie until init reaps it: gone for our purpose
            return Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0] == "Z"
        wait_for(gone, 30, f"child {child} to end with its supervisor", every=0.05)
    finally:
        supervisor.kill()


def _pump(stream, into: queue.Queue) -> None:
    for raw in stream:
        into.put(raw.decode(errors="replace"))


def _next_match(lines: queue.Queue, pattern: str, timeout: float, seen: list[str]) -> re.Match:
    """The first line still to come that matches ``pattern``."""
    import time

    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        seen.append(line)
        if match := re.search(pattern, line):
            return match
    raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f} s; output:\n" + "".join(seen)[-4000:])


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_supervise_replaces_a_killed_worker_with_one_that_serves_tasks(tmp_path):
    require_postgres()
    with private_redis(tmp_path) as port:
        url = f"redis://127.0.0.1:{port}/0"
        env = worker_env(connection.settings_dict, url, TEMPER_VAR_DIR=str(tmp_path / "var"))
        worker = [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", "control", "-c", "1",
                  "-n", f"supervised-{os.getpid()}@%h", "--without-mingle", "--without-gossip", "-l", "info"]
        proc = subprocess.Popen([sys.executable, "manage.py", "supervise", "--name", "control", "--", *worker], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        seen: list[str] = []
        client = Celery("supervise-test", broker=url, backend=url)
        try:
            first = int(_next_match(lines, r"control started \(pid (\d+)\)", 60, seen).group(1))
            assert client.send_task("temper.control.ping", args=[1], queue="control").get(timeout=120) == 2
            os.kill(first, signal.SIGKILL)
            _next_match(lines, rf"control \(pid {first}\) exited with signal 9; restarting in 1 s", 30, seen)
            second = int(_next_match(lines, r"control restarted \(pid (\d+), restart 1\)", 30, seen).group(1))
            assert second != first
            assert client.send_task("temper.control.ping", args=[2], queue="control").get(timeout=120) == 3
            assert proc.poll() is None
            proc.terminate()  # stops the worker, then the supervisor
            _next_match(lines, r"supervise: stopped", 60, seen)
            assert proc.wait(timeout=60) == 0
        finally:
            client.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_every_compose_worker_and_beat_restarts_unless_stopped():
    """compose is the supervisor in production: each Celery process comes back after it exits."""
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    celery = {name: svc for name, svc in services.items() if svc.get("command", [])[:1] == ["celery"]}
    assert {n for n in celery if n.startswith("worker-")} and "beat" in celery
    assert {name: svc.get("restart") for name, svc in celery.items()} == {name: "unless-stopped" for name in celery}


@pytest.mark.slow
def test_demo_restarts_its_killed_worker_which_then_serves_a_task(tmp_path):
    """``manage.py demo`` (embedded default: file-system broker) under the same supervisor: its
    worker killed with SIGKILL comes back with a new pid and answers a task sent afterwards. Without
    the demo runs (``--no-run``): their drivers would hold both of the worker's processes for minutes,
    and the task would wait for them rather than for the restart."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env["TEMPER_VAR_DIR"] = str(tmp_path / "var")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", "--no-run", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(demo.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        first = int(_next_match(lines, r"processes: .*\bworker pid (\d+)", 600, seen).group(1))
        os.kill(first, signal.SIGKILL)
        _next_match(lines, rf"worker \(pid {first}\) exited with signal 9; restarting in 1 s", 30, seen)
        second = int(_next_match(lines, r"worker restarted \(pid (\d+), restart 1\)", 30, seen).group(1))
        assert second != first
        # A task sent now to one of its queues (not the control worker's), through the demo's own
        # broker and result store, is answered.
        ping = ("from workers.celery import app; "
                "print('pong', app.send_task('temper.control.ping', args=[20], queue='rollout').get(timeout=240))")
        answer = subprocess.run([sys.executable, "-c", ping], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert "pong 21" in answer.stdout, answer.stderr[-3000:]
        assert demo.poll() is None
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=60)
