"""The first run of a new installation: a platform admin, a first team it administers, the
team's quota and a CPU pool, the domain catalogue, a base model every team may name, and
(optionally) an API token. Safe to run again: what exists is kept, and only what is missing is
made. ``docker compose run --rm web python manage.py bootstrap --base-model tiny``."""
from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from controlplane.accounts import services as account_services
from controlplane.accounts.models import Membership, Role, Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import MAX_TOKEN_DAYS
from controlplane.common.errors import InvalidInput
from controlplane.registry.models import BaseModel
from controlplane.registry.services import base_model_register
from controlplane.scheduling.models import PoolKind, ResourcePool, TeamQuota

PASSWORD_ENV = "TEMPER_ADMIN_PASSWORD"
TINY = "tiny"
"""``--base-model tiny``: the small character-level Llama built on the spot (no model hub)."""


class Command(BaseCommand):
    help = ("Set up a new installation: the platform admin, a first team, its quota, a CPU pool, the domain "
            "catalogue, a base model (a directory, or the tiny model built here) and an optional API token. "
            "Idempotent.")

    def add_arguments(self, parser):
        parser.add_argument("--admin", default="admin", help="the platform admin's username (default admin)")
        parser.add_argument("--email", default="", help="the admin's e-mail address")
        parser.add_argument("--team", default="main", help="the first team's slug (default main)")
        parser.add_argument("--team-name", default="", help="its display name (default: the slug)")
        parser.add_argument("--base-model", default="", metavar="tiny|NAME=DIR",
                            help="register a base model every team may name base:NAME: 'tiny' builds the tiny "
                                 "model under TEMPER_VAR_DIR/models/tiny; NAME=DIR registers a directory with "
                                 "config.json (outside the server's storage)")
        parser.add_argument("--cpu-slots", type=int, default=None,
                            help="capacity of the 'cpu' pool: runs trained at once on CPU workers (created as 1 "
                                 "when no pool exists)")
        parser.add_argument("--token", default="", metavar="NAME",
                            help="also create an API token of this name for the team (as admin); shown once")
        parser.add_argument("--token-days", type=int, default=30)
        parser.add_argument("--no-sync", action="store_true", help="do not sync the domain catalogue")
        parser.add_argument("--json", action="store_true",
                            help="end with one JSON line: admin, password (when made now), team, base_model, token")

    def handle(self, *args, **opts):
        base_spec = self._parse_base(opts["base_model"])
        if opts["cpu_slots"] is not None and not 0 <= opts["cpu_slots"] <= 1_000_000:
            raise CommandError("--cpu-slots: must be between 0 and 1000000")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", opts["team"]):
            raise CommandError(f"--team: {opts['team']!r} is not a slug (lowercase letters, digits and '-', "
                               "64 characters at most)")
        if opts["token"] and not 1 <= opts["token_days"] <= MAX_TOKEN_DAYS:
            raise CommandError(f"--token-days: must be between 1 and {MAX_TOKEN_DAYS}")

        user, password = self._admin(opts["admin"], opts["email"])
        team = self._team(user, opts["team"], opts["team_name"] or opts["team"])
        self._pools(opts["cpu_slots"])
        if not opts["no_sync"]:
            call_command("domains", "sync", "--no-progress", stdout=self.stdout)
        base_ref = self._base_model(user, base_spec) if base_spec else ""
        token = self._token(user, team, opts["token"], opts["token_days"]) if opts["token"] else ""

        self._next_steps(user, team, base_ref, token, password)
        if opts["json"]:
            out = {"admin": user.username, "team": team.slug, "base_model": base_ref, "token": token}
            if password:
                out["password"] = password
            self.stdout.write(json.dumps(out))

    # ------------------------------------------------------------------ steps
    def _parse_base(self, spec: str) -> tuple[str, Path | None] | None:
        spec = spec.strip()
        if not spec:
            return None
        if spec == TINY:
            return TINY, None
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise CommandError(f"--base-model: expected 'tiny' or NAME=DIR, got {spec!r}")
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", name):
            raise CommandError(f"--base-model: {name!r} is not a name (letters, digits, '-' and '_')")
        return name, Path(path)

    def _admin(self, username: str, email: str):
        """The platform admin: made with the password of TEMPER_ADMIN_PASSWORD (checked against
        the password validators) or a generated one, returned so it can be shown once. An
        existing user is made a superuser and keeps its password."""
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is not None:
            if not (user.is_superuser and user.is_staff):
                user.is_superuser = user.is_staff = True
                user.save(update_fields=["is_superuser", "is_staff"])
            self.stdout.write(f"admin {username}: exists (password unchanged)")
            return user, ""
        password = os.environ.get(PASSWORD_ENV, "")
        generated = not password
        if generated:
            password = secrets.token_urlsafe(16)
        try:
            validate_password(password, User(username=username, email=email))
        except ValidationError as e:
            raise CommandError(f"{PASSWORD_ENV}: " + " ".join(e.messages)) from None
        user = User.objects.create_superuser(username=username, email=email, password=password)
        self.stdout.write(f"admin {username}: created" + (" (password generated)" if generated else
                                                         f" (password from {PASSWORD_ENV})"))
        return user, password if generated else ""

    @transaction.atomic
    def _team(self, user, slug: str, name: str) -> Team:
        team, made = Team.objects.get_or_create(slug=slug, defaults={"name": name})
        member, joined = Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.ADMIN})
        if not joined and member.role != Role.ADMIN:
            member.role = Role.ADMIN
            member.save(update_fields=["role"])
        TeamQuota.objects.get_or_create(team=team)
        self.stdout.write(f"team {team.slug}: {'created' if made else 'exists'}, {user.username} is its admin")
        return team

    def _pools(self, cpu_slots: int | None) -> None:
        pool = ResourcePool.objects.filter(name="cpu").first()
        if pool is None and (cpu_slots is not None or not ResourcePool.objects.exists()):
            pool = ResourcePool.objects.create(name="cpu", kind=PoolKind.CPU, capacity=1 if cpu_slots is None else cpu_slots)
            self.stdout.write(f"pool cpu: created with {pool.capacity} slot(s)")
        elif pool is not None and cpu_slots is not None and pool.capacity != cpu_slots:
            pool.capacity = cpu_slots
            pool.save(update_fields=["capacity", "updated_at"])
            self.stdout.write(f"pool cpu: {cpu_slots} slot(s)")

    def _base_model(self, user, spec: tuple[str, Path | None]) -> str:
        name, path = spec
        if path is None:
            path = Path(settings.VAR_DIR) / "models" / TINY
            if not (path / "config.json").is_file():
                from trainer.models.tiny import build_tiny  # lazy: torch, only when the model is built

                build_tiny(path)
                self.stdout.write(f"built the tiny model at {path}")
        known = BaseModel.objects.filter(name=name).first()
        if known is not None and Path(known.path) == Path(os.path.realpath(path)):
            self.stdout.write(f"base model base:{name}: exists ({known.path})")
            return f"base:{name}"
        try:
            base = base_model_register(actor=Principal.for_user(user), data={
                "name": name, "path": str(path), "description": "registered by manage.py bootstrap"})
        except InvalidInput as e:
            raise CommandError("--base-model: " + "; ".join(err.message for err in e.errors)) from None
        self.stdout.write(f"base model base:{name}: registered ({base.path})")
        return f"base:{name}"

    def _token(self, user, team: Team, name: str, days: int) -> str:
        try:
            _, secret = account_services.token_create(actor=Principal.for_user(user), team=team, name=name,
                                                      role=Role.ADMIN, expires_in_days=days)
        except InvalidInput as e:
            raise CommandError("; ".join(f"--token{'-days' if err.path == 'expires_in_days' else ''}: {err.message}"
                                         for err in e.errors)) from None
        self.stdout.write(f"token {name!r} for team {team.slug} created (shown once, below)")
        return secret

    def _next_steps(self, user, team: Team, base_ref: str, token: str, password: str) -> None:
        w = self.stdout.write
        w(self.style.SUCCESS("Temper is set up."))
        if password:
            w(f"  sign in as {user.username} with password {password} (shown once; change it at /admin/)")
        if token:
            w(f"  API token for team {team.slug}: {token}")
        base = base_ref or "base:<name> (register one: manage.py bootstrap --base-model NAME=DIR)"
        w("Next:")
        w(f"  1. open the site and start a run at /runs/new/ with team {team.slug} and base model {base}")
        w(f"     (or: manage.py temper --user {user.username} runs create run.yaml --start)")
        w(f"  2. add people: manage.py createsuperuser, then manage.py temper teams add-member {team.slug} USER member")
        w(f"  3. quotas: manage.py temper quota set {team.slug} --gpus N --runs N; pools of GPU and sandbox slots: "
          "/manage/ or /admin/, with their prices (docs/orchestration.md)")
