"""What a run pins of a domain, and what stays live — each read in one place.

A run pins a :class:`~controlplane.domains.models.DomainVersion`: its verifier cascade and its
task source (what the domain asks and how it is judged) never change under a running run.
The admins' quota and priority stay live: a change reaches running runs at their next step.

* :func:`pinned` gives a version as the trainer's one domain type, a
  :class:`trainer.catalogue.DomainSpec` (its ``version`` the pinned one); workers read its fields,
  never ``snapshot.get(key, default)``.
* :class:`DomainQuota` is the live part of the Domain row (:func:`domain_quotas`):
  ``max_concurrent_sandboxes`` bounds the domain's sandboxes across all workers (one Redis key
  per domain, whatever version a run pinned), ``max_share`` caps its share of a run's samples,
  ``task_timeout_s`` sets how long a driver waits for its verifications, ``priority`` orders
  its verification batches in the queue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.domains.models import Domain, DomainVersion
from trainer import catalogue
from trainer.catalogue import DomainSpec


def pinned(version: DomainVersion) -> DomainSpec:
    """The domain as a run pins ``version``: its snapshot's verifier, title, kind and task source
    (an upload's tasks), with a code domain's task source and environment from the trainer's
    catalogue (ValueError names the slug when there is neither)."""
    return catalogue.pinned(version.domain.slug, version.version, version.snapshot)


@dataclass(frozen=True)
class DomainQuota:
    """The live quota and priority of one domain."""

    max_concurrent_sandboxes: int
    """Sandboxes of the domain running at once across all workers."""
    max_share: float
    """Largest share of a run's samples the domain may take."""
    task_timeout_s: float
    """Per-task verification timeout the driver's deadlines are derived from."""
    priority: int
    """1-99; higher goes first in the verification queues."""

    @classmethod
    def from_domain(cls, domain: Domain) -> "DomainQuota":
        return cls(max_concurrent_sandboxes=domain.max_concurrent_sandboxes, max_share=domain.max_share,
                   task_timeout_s=domain.task_timeout_s, priority=domain.priority)


def domain_quotas(*, slugs: list[str] | set[str]) -> dict[str, DomainQuota]:
    """The current quota of each named domain (one query)."""
    return {d.slug: DomainQuota.from_domain(d) for d in Domain.objects.filter(slug__in=list(slugs))
            .only("slug", "max_concurrent_sandboxes", "max_share", "task_timeout_s", "priority")}


def pinned_verifier(*, slug: str, version: int) -> dict[str, Any]:
    """The verifier spec ``slug`` pins at ``version`` (what a verify worker runs; no task source
    is needed to verify, so none is looked up)."""
    return DomainVersion.objects.values_list("snapshot", flat=True).get(domain__slug=slug, version=version)["verifier"]
