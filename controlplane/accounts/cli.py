"""What the management commands share: who is acting, and service errors as command errors."""
from __future__ import annotations

import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput, ServiceError


def cli_actor(username: str) -> Principal:
    """The user a command acts as: ``--user NAME`` (or ``TEMPER_USER``), else the only superuser."""
    User = get_user_model()
    if not username:
        supers = list(User.objects.filter(is_superuser=True)[:2])
        if len(supers) != 1:
            raise CommandError("say who you are: --user NAME or TEMPER_USER=NAME")
        return Principal.for_user(supers[0])
    user = User.objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"--user: no user named {username!r}")
    return Principal.for_user(user)


class ServiceCommand(BaseCommand):
    """A command whose subcommands are ``area action`` pairs handled by ``do_<area>_<action>``,
    acting as ``--user``; service errors become clean command errors (field paths included)."""

    def _actor(self, username: str) -> Principal:
        return cli_actor(username)

    def add_arguments(self, parser):
        parser.add_argument("--user", default=os.environ.get("TEMPER_USER", ""), help="act as this user (default $TEMPER_USER)")
        self.add_commands(parser.add_subparsers(dest="area", required=True))

    def add_commands(self, sub) -> None:
        """Add the command's parsers to ``sub``: one per area, its actions under ``dest="action"``
        (or one per action, with no areas)."""
        raise NotImplementedError

    def handler_name(self, opts: dict) -> str:
        """The method that handles a parsed command line: ``do_<area>_<action>`` (dashes as underscores)."""
        return f"do_{opts['area']}_{opts.get('action') or ''}".replace("-", "_").rstrip("_")

    def describe(self, exc: ServiceError) -> str:
        """The message a refused service call ends the command with."""
        return str(exc)

    def handle(self, *args, **opts):
        self.actor = self._actor(opts["user"])
        try:
            getattr(self, self.handler_name(opts))(opts)
        except InvalidInput as exc:
            raise CommandError("invalid input:\n  " + "\n  ".join(str(e) for e in exc.errors)) from None
        except ServiceError as exc:
            raise CommandError(self.describe(exc)) from None

    def out(self, text: str) -> None:
        self.stdout.write(text)
