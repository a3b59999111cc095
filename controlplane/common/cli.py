"""What the management commands share: who is acting."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from controlplane.accounts.principal import Principal


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
