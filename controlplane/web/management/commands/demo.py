"""``python manage.py demo``: the whole embedded-default stack in one terminal.

Migrates, prepares the demo (admin, team, domains), then runs the web server (uvicorn: one
process, or ``--web-processes N`` on one port), a Celery worker driving runs, one for their verifications, judging and evaluations, one on the
scheduler's, one for verifier audits, and Celery beat as child processes (each started again, with backoff, if it
exits: controlplane/web/supervisor.py), prints the URL and the credentials, and stops them all on
Ctrl-C. Nothing to install: SQLite, a file-system broker, the in-memory layer.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from controlplane.web.supervisor import Supervisor

from controlplane.web.serving import PROCESSES_ENV, web_command, web_processes


DRIVE_QUEUES = ("rollout", "train")
"""The queues of run drivers: a task there holds its process for the whole run."""


def demo_processes(*, python: str, var_dir, host: str, port: int, web_processes: int = 1,
                   workers: bool = True) -> dict[str, tuple[list[str], str]]:
    """The demo's processes: name -> (command, log file name).

    ``worker`` drives runs (the rollout and train queues) with two processes: the demo's two runs
    each hold one for as long as they train; ``verify`` serves what the drivers send (verifications,
    judging, evaluations of checkpoints) with processes of its own, so a driver never waits for a
    process that another driver holds (with one worker for both, the judged run's judge batches
    waited for ever behind the two drivers); ``control`` serves the scheduler's queue alone (scheduling ticks, the worker
    sweep, pings: each well under a second), so a run started while both training processes are
    busy is still admitted at once; ``notify`` sends alert deliveries on threads; ``audit`` runs verifier audits at a lower CPU priority; beat
    asks for a tick every TEMPER_SCHEDULE_PERIOD_S."""
    procs: dict[str, tuple[list[str], str]] = {
        # Several processes share the SQLite file as the workers do; without Redis each has its own
        # in-memory channel layer, and its live sockets tail the database once a second.
        "web": (web_command(host=host, port=port, processes=web_processes, python=python), "web.log"),
    }
    if not workers:
        return procs
    celery = [python, "-m", "celery", "-A", "workers.celery"]
    drive_queues = [q for q in settings.CELERY_QUEUES_RUN if q in DRIVE_QUEUES]
    work_queues = [q for q in settings.CELERY_QUEUES_RUN if q not in DRIVE_QUEUES and q != "control"]
    procs["worker"] = ([*celery, "worker", "-Q", ",".join(drive_queues), "-c", "2", "-n", "demo@%h", "-l", "info"], "worker.log")
    procs["verify"] = ([*celery, "worker", "-Q", ",".join(work_queues), "-c", "2", "-n", "verify@%h", "-l", "info"], "verify.log")
    procs["control"] = ([*celery, "worker", "-Q", "control", "-c", "1", "-n", "control@%h", "-l", "info"], "control.log")
    # Alert deliveries wait on other hosts (5 s a try at most): threads of their own, so a slow
    # receiver never holds the scheduler's process.
    procs["notify"] = ([*celery, "worker", "-Q", "notify", "-P", "threads", "-c", "4", "-n", "notify@%h", "-l", "info"],
                       "notify.log")
    # Verifier audits of the catalogue sync take minutes of CPU: one process of their own,
    # at a lower CPU priority, so the demo run's steps go first.
    procs["audit"] = (["nice", "-n", "10", *celery, "worker", "-Q", "audit", "-c", "1", "-n", "audit@%h", "-l", "info"],
                      "audit.log")
    procs["beat"] = ([*celery, "beat", "-l", "info", "-s", str(var_dir / "celerybeat-schedule")], "beat.log")
    return procs


class Command(BaseCommand):
    help = "Run the demo: web + worker + beat on the embedded default."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("TEMPER_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("TEMPER_PORT", 8000)))
        parser.add_argument("--no-worker", action="store_true", help="web only")
        parser.add_argument("--no-run", action="store_true",
                            help="start the stack without creating the demo runs (the catalogue, team and suite are set up)")
        parser.add_argument("--web-processes", default=None, metavar="N",
                            help=f"web server processes (default ${PROCESSES_ENV} or 1): uvicorn workers on one "
                                 "port (controlplane/web/serving.py)")

    def _wait_until_serving(self, host: str, port: int, proc: subprocess.Popen, log) -> None:
        """Return once the web server accepts connections, so the printed URL works."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise CommandError(f"the web server exited with code {proc.returncode}; see {log}")
            try:
                socket.create_connection((host, port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise CommandError(f"the web server did not start listening on {host}:{port} within 120 s; see {log}")

    def handle(self, *args, **opts):
        try:
            web_processes_n = web_processes(opts["web_processes"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        call_command("migrate", verbosity=0)
        call_command("demo_setup", stdout=self.stdout, no_run=opts["no_run"])
        logs = settings.VAR_DIR / "logs"
        logs.mkdir(exist_ok=True)
        py = sys.executable
        procs = demo_processes(python=py, var_dir=settings.VAR_DIR, host=opts["host"], port=opts["port"],
                               web_processes=web_processes_n, workers=not opts["no_worker"])
        # The worker's two processes (the run's driver, and the evaluations of its checkpoints or the
        # verifications) each take one torch thread unless told otherwise: the tiny model gains
        # nothing from more, and two processes each using every core slow each other several-fold.
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        # Every process is supervised: one that exits (a crash, a kill) is started again after a
        # backoff, with a line here saying so, so no queue is left without its worker.
        supervisor = Supervisor(log=self.stderr.write, cwd=settings.BASE_DIR, env=env)
        running: dict[str, subprocess.Popen] = {}
        for name, (cmd, log) in procs.items():
            running[name] = supervisor.add(name, cmd, log_path=logs / log).proc
        self._wait_until_serving(opts["host"], opts["port"], running["web"], logs / "web.log")
        user, password = (settings.VAR_DIR / "demo_credentials").read_text().split()[:2]
        url = f"http://{opts['host']}:{opts['port']}/"
        self.stdout.write(self.style.SUCCESS(f"\nTemper is up at {url}  (user {user}, password {password})"))
        self.stdout.write(f"processes: {', '.join(f'{n} pid {p.pid}' for n, p in running.items())}; logs in {logs}")
        self.stdout.write("Press Ctrl-C to stop.")
        supervisor.serve(0.5)
