"""``python manage.py supervise -- CMD ...``: run one command and start it again whenever it exits.

For a worker on a host of its own (README "Scale out"), where nothing like compose's
``restart: unless-stopped`` watches it: ``python manage.py supervise -- celery -A workers.celery
worker -Q verify -c 8``. Restarts back off from 1 s to 60 s and each is logged; SIGTERM or Ctrl-C
stops the command and then the supervisor.
"""
from __future__ import annotations


from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.web.supervisor import Supervisor


class Command(BaseCommand):
    help = "Run a command (a Celery worker) and restart it whenever it exits, with backoff."

    def add_arguments(self, parser):
        parser.add_argument("--name", default="worker", help="the name in log lines (default: worker)")
        parser.add_argument("cmd", nargs="+", help="the command, after --")

    def handle(self, *args, **opts):
        cmd = opts["cmd"]
        if not cmd:
            raise CommandError("give the command to supervise after --, e.g. -- celery -A workers.celery worker -Q verify")

        def log(line: str) -> None:
            self.stdout.write(f"supervise: {line}")
            self.stdout.flush()

        supervisor = Supervisor(log=log, cwd=settings.BASE_DIR)
        supervisor.trap_signals()
        child = supervisor.add(opts["name"], cmd)
        log(f"{opts['name']} started (pid {child.proc.pid}): {' '.join(cmd)}")
        try:
            supervisor.serve(0.2)
        finally:
            log("stopped")
