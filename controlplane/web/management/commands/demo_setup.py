"""Prepare the embedded-default demo: an admin, a team, the catalogue. Safe to run again."""
from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from controlplane.accounts.models import Membership, Role, Team
from controlplane.scheduling.models import ResourcePool, TeamQuota


class Command(BaseCommand):
    help = "Create the demo admin (credentials printed and kept in var/demo_credentials), team and domains."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, **opts):
        User = get_user_model()
        cred_file = settings.VAR_DIR / "demo_credentials"
        username = opts["username"]
        user = User.objects.filter(username=username).first()
        if user is None or not cred_file.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser(username=username, email="", password=password)
            else:
                user.set_password(password)
                user.save()
            cred_file.write_text(f"{username}\n{password}\n")
            cred_file.chmod(0o600)
        username, password = cred_file.read_text().split()[:2]
        team, _ = Team.objects.get_or_create(slug="demo", defaults={"name": "Demo team"})
        Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.ADMIN})
        TeamQuota.objects.get_or_create(team=team)
        for name, kind, capacity in (("cpu", "cpu", 2), ("sandbox", "sandbox", 8)):
            ResourcePool.objects.get_or_create(name=name, defaults={"kind": kind, "capacity": capacity})
        call_command("domains", "sync", stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS(f"demo admin: username {username}  password {password}"))
