"""What a run pins of a domain, and what stays live — each read in one place.

A run pins a :class:`~controlplane.domains.models.DomainVersion`: its verifier cascade and its
task source (what the domain asks and how it is judged) never change under a running run.
The admins' quota and priority stay live: a change reaches running runs at their next step.

* :class:`PinnedDomain` is built from a version in one place (:meth:`PinnedDomain.from_version`);
  workers read its fields, never ``snapshot.get(key, default)``.
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


@dataclass(frozen=True)
class PinnedDomain:
    """One domain version as a run uses it."""

    slug: str
    """The domain's slug."""
    version: int
    """The pinned version."""
    title: str
    """Human-readable name."""
    kind: str
    """Domain kind (math, code, ...)."""
    family: str
    """Task-source family (``jsonl`` for uploads)."""
    verifier: dict[str, Any]
    """The verifier cascade spec."""
    task_source: dict[str, Any]
    """The task source spec (an upload's tasks are in it)."""

    @classmethod
    def from_version(cls, version: DomainVersion) -> "PinnedDomain":
        """The pin of ``version`` (its snapshot must hold a verifier and a task source)."""
        snap = version.snapshot
        return cls(slug=version.domain.slug, version=version.version, title=snap["title"], kind=snap["kind"],
                   family=snap.get("family") or snap["task_source"].get("family", ""), verifier=snap["verifier"],
                   task_source=snap["task_source"])

    @property
    def is_upload(self) -> bool:
        """True for a domain defined by uploaded tasks (its tasks live in the pin)."""
        return self.task_source.get("family") == "jsonl"


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


def pinned_domain(*, slug: str, version: int) -> PinnedDomain:
    """The pin of ``slug`` at ``version``."""
    return PinnedDomain.from_version(DomainVersion.objects.select_related("domain").get(domain__slug=slug, version=version))
