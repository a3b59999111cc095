"""Every checkpoint a run saves is registered as a ModelVersion, in the same transaction; a
``registry:<version>`` model reference is answered here, within the referring team."""
from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from controlplane.common.model_refs import RegistryHit, base_model_wanted, registry_version_wanted
from controlplane.registry.selectors import version_for_team
from controlplane.registry.services import version_is_stored, version_register_checkpoint
from controlplane.registry.models import BaseModel
from controlplane.runs.models import Checkpoint

log = logging.getLogger(__name__)


@receiver(post_save, sender=Checkpoint, dispatch_uid="registry-register-checkpoint")
def register_checkpoint(sender, instance: Checkpoint, raw: bool = False, **kwargs) -> None:
    if raw:  # loading fixtures
        return
    try:
        with transaction.atomic():  # a savepoint: a registry problem never loses the checkpoint row
            version_register_checkpoint(checkpoint=instance)
    except Exception:  # noqa: BLE001 - logged; the run goes on, `temper registry sync` can register later
        log.exception("could not register checkpoint %s of run %s", instance.step, instance.run_id)


@receiver(registry_version_wanted, dispatch_uid="registry-model-reference")
def version_path(sender, name: str, team_id: int | None, **kwargs) -> RegistryHit | None:
    """Where the version ``name`` of team ``team_id`` is (None when it has none)."""
    version = version_for_team(ref=name, team_id=team_id)
    return RegistryHit(version.path, version_is_stored(version)) if version is not None else None


@receiver(base_model_wanted, dispatch_uid="registry-base-model")
def base_model_path(sender, name: str, **kwargs) -> str | None:
    """The directory of the base model registered as ``name`` (None when none is)."""
    return BaseModel.objects.filter(name=name).values_list("path", flat=True).first()
