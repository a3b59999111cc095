"""Reads for judges, queues, items and their agreement statistics, filtered to the actor's teams."""
from __future__ import annotations

import math
from typing import Any, Iterable

from django.db.models import Count, Prefetch, Q, QuerySet

from controlplane.accounts.principal import Principal
from controlplane.common.errors import found
from controlplane.common.queries import filter_given
from controlplane.domains.schemas import judge_stage_refs
from controlplane.review import stats
from controlplane.review.models import Judge, JudgeConfig, Label, ReviewItem, ReviewQueue, ShadowScore

N_BOOT = 1000


def judge_list(*, actor: Principal) -> QuerySet[Judge]:
    qs = Judge.objects.select_related("team", "active", "previous")
    return qs if actor.platform_admin else qs.filter(team_id__in=actor.team_ids)


def judge_get(*, actor: Principal, slug: str) -> Judge:
    return found(judge_list(actor=actor).filter(slug=slug).first(), f"judge {slug!r} not found")


def config_get(*, judge: Judge, version: int) -> JudgeConfig:
    config = judge.versions.select_related("judge").filter(version=version).first()
    return found(config, f"judge {judge.slug!r} has no version {version}")


def queue_list(*, actor: Principal, domain: str = "", judge: str = "") -> QuerySet[ReviewQueue]:
    qs = ReviewQueue.objects.filter(team_id__in=actor.team_ids).select_related("team", "domain", "judge_config__judge")
    return filter_given(qs, domain__slug=domain, judge_config__judge__slug=judge).annotate(n_items=Count("items", distinct=True))


def queue_get(*, actor: Principal, queue_id: int) -> ReviewQueue:
    queue = ReviewQueue.objects.filter(pk=queue_id, team_id__in=actor.team_ids).select_related("team", "domain", "judge_config__judge")
    return found(queue.first(), f"review queue {queue_id} not found")


def item_get(*, actor: Principal, item_id: int) -> ReviewItem:
    item = ReviewItem.objects.filter(pk=item_id, queue__team_id__in=actor.team_ids).select_related("queue__judge_config__judge")
    return found(item.first(), f"review item {item_id} not found")


def consensus(values: list[float], fmt: str) -> float:
    """One human value per item: majority for pass/fail (ties pass), rounded mean for 1-5.

    >>> consensus([1, 0, 1], "binary"), consensus([0, 1], "binary"), consensus([3, 4], "ordinal")
    (1.0, 1.0, 4.0)
    """
    mean = sum(values) / len(values)
    return float(math.floor(mean + 0.5)) if fmt == "ordinal" else float(mean >= 0.5)


def _rows(items: Iterable[ReviewItem], judge_raw: dict[int, float], fmt: str) -> dict[str, Any]:
    """Arrays for the statistics from items with prefetched ``done`` labels, in the items' id
    order: the bootstrap resamples by position, so the same items read in another order (a queue's
    page and its judge version's calibration) would give another interval for the same data."""
    judge, human, propensity, per_item = [], [], [], []
    reviewers: dict[int, int] = {}
    for item in sorted(items, key=lambda i: i.pk):
        labels = [lab for lab in item.done if not lab.skipped]
        if not labels or item.pk not in judge_raw:
            continue
        judge.append(judge_raw[item.pk])
        human.append(consensus([lab.value for lab in labels], fmt))
        propensity.append(item.propensity)
        per_item.append({lab.reviewer_id: lab.value for lab in labels})
        for lab in labels:
            reviewers.setdefault(lab.reviewer_id, len(reviewers))
    table = None
    if len(reviewers) > 1 and any(len(p) > 1 for p in per_item):
        table = [[p.get(r, math.nan) for p in per_item] for r in reviewers]
    return {"judge": judge, "human": human, "propensity": propensity, "table": table}


def _labelled(qs: QuerySet[ReviewItem]) -> QuerySet[ReviewItem]:
    return qs.prefetch_related(Prefetch("labels", queryset=Label.objects.filter(skipped=False), to_attr="done"))


def _report(rows: dict[str, Any], fmt: str, seed: int = 0) -> dict[str, Any]:
    return stats.agreement_report(rows["judge"], rows["human"], fmt=fmt, propensity=rows["propensity"] or None,
                                  n_boot=N_BOOT, seed=seed, reviewer_table=rows["table"])


def queue_report(queue: ReviewQueue) -> dict[str, Any]:
    """Agreement of the queue's judge version with its reviewers on the queue's items."""
    items = list(_labelled(queue.items.all()))
    rows = _rows(items, {i.pk: i.judge_raw for i in items}, queue.judge_config.score_format)
    return _report(rows, queue.judge_config.score_format)


def config_scores(config: JudgeConfig) -> tuple[list[ReviewItem], dict[int, float]]:
    """Labelled items with ``config``'s score on each: its own queues' items, then its shadow
    scores on other versions' items."""
    own = list(_labelled(ReviewItem.objects.filter(queue__judge_config=config, labels__skipped=False).distinct()))
    raw = {i.pk: i.judge_raw for i in own}
    shadow = ShadowScore.objects.filter(judge_config=config, raw__isnull=False).values_list("item_id", "raw")
    shadow_raw = {item_id: r for item_id, r in shadow if item_id not in raw}
    extra = list(_labelled(ReviewItem.objects.filter(pk__in=list(shadow_raw))))
    raw.update(shadow_raw)
    return own + extra, raw


def config_report(config: JudgeConfig) -> dict[str, Any]:
    items, raw = config_scores(config)
    return _report(_rows(items, raw, config.score_format), config.score_format)


def compare(*, judge: Judge, a: JudgeConfig, b: JudgeConfig) -> dict[str, Any]:
    """Side by side on the labelled items both versions scored (own or shadow)."""
    items_a, raw_a = config_scores(a)
    items_b, raw_b = config_scores(b)
    common = sorted(set(raw_a) & set(raw_b))
    by_id = {i.pk: i for i in items_a + items_b}
    items = [by_id[pk] for pk in common]
    out: dict[str, Any] = {"judge": judge.slug, "n_common": len(common), "versions": []}
    for config, raw in ((a, raw_a), (b, raw_b)):
        if config.score_format != a.score_format:
            fmt = config.score_format
        else:
            fmt = a.score_format
        report = _report(_rows(items, raw, fmt), fmt)
        out["versions"].append({"version": config.version, "calibrated": config.is_calibrated,
                                "active": judge.active_id == config.pk, "report": report})
    changed = []
    for item in items[:200]:
        if raw_a[item.pk] != raw_b[item.pk]:
            changed.append({"item": item.pk, "a": raw_a[item.pk], "b": raw_b[item.pk],
                            "human": consensus([lab.value for lab in item.done], a.score_format)})
    out["changed_items"] = changed
    return out


def shadow_summary(config: JudgeConfig) -> dict[str, int]:
    qs = ShadowScore.objects.filter(judge_config=config)
    return {"scored": qs.filter(raw__isnull=False).count(), "errors": qs.filter(raw__isnull=True).count()}


def queue_progress(queue: ReviewQueue, user=None) -> dict[str, Any]:
    items = queue.items.annotate(n=Count("labels", filter=Q(labels__skipped=False)))
    total = items.count()
    done = items.filter(n__gte=queue.reviewers_per_item).count()
    out = {"items": total, "complete": done, "labels": Label.objects.filter(item__queue=queue, skipped=False).count(),
           "skipped": Label.objects.filter(item__queue=queue, skipped=True).count()}
    if user is not None:
        out["mine"] = Label.objects.filter(item__queue=queue, reviewer=user).count()
    return out


def queue_class_note(queue: ReviewQueue) -> str:
    """What the queue page says when the judge's classes (pass, fail) are not both in its sample:
    agreement measured on one class cannot tell the judge from a constant answer."""
    if queue.judge_config.score_format == "ordinal":
        return ""
    params = queue.params or {}
    population = params.get("population_classes")
    if population and queue.population and (not population["pass"] or not population["fail"]):
        only = "pass" if population["pass"] else "fail"
        return (f"The judge scored every one of the {queue.population} trajectories this queue was sampled from as {only}: "
                f"its agreement with reviewers cannot be told from a constant answer's, and kappa means nothing until it "
                f"scores both classes (after more training, on another run, or as another judge version).")
    added = params.get("added_per_class") or {}
    if added:
        return (f"The uniform sample held too few items the judge scored "
                + " or ".join(added) + "; " + ", ".join(f"{n} {c}" for c, n in added.items())
                + f" were added from the population (the judge scored {population['pass']} pass and {population['fail']} fail), "
                  "and each item is weighted by its class's sampling rate, so the weighted estimates stay unbiased.")
    total = queue.items.count()
    passed = queue.items.filter(judge_score__gte=0.5).count()
    if total and passed in (0, total):
        only = "pass" if passed else "fail"
        return (f"Every item of this sample is one the judge scored {only}: agreement on it cannot tell the judge from a "
                f"constant answer. A uniform sample adds both classes where the population has them.")
    return ""


HISTORY = 20
"""Labels of a reviewer's history on a queue page."""


def queue_history(queue: ReviewQueue, user, limit: int = HISTORY) -> list[dict[str, Any]]:
    """The reviewer's latest labels in the queue, newest first, with the judge's score (shown once
    they labelled) and whether they agree; the first can be taken back (``label_undo``)."""
    fmt = queue.judge_config.score_format
    return [{"item": label.item_id, "task_id": label.item.task_id, "value": label.value, "skipped": label.skipped,
             "skip_reason": label.skip_reason, "judge_raw": label.item.judge_raw, "judge_score": label.item.judge_score,
             "agrees": label_agrees(label.item.judge_raw, label.value, fmt), "at": label.created_at.isoformat()}
            for label in Label.objects.filter(item__queue=queue, reviewer=user).select_related("item")
            .order_by("-created_at", "-id")[:limit]]


def label_agrees(judge_raw: float, value: float | None, fmt: str) -> bool | None:
    """Whether a reviewer's label agrees with the judge's score, by the categories the statistics
    compare (a 0-1 judge's score against pass/fail at 0.5); None for a skip."""
    if value is None:
        return None
    j, _ = stats.categories([judge_raw], fmt)
    h, _ = stats.categories([value], "binary" if fmt == "unit" else fmt)
    return bool(j[0] == h[0])


def queue_progress_many(queues: list[ReviewQueue]) -> list[dict[str, int]]:
    """Items and complete items of many queues in one query."""
    per_item = (ReviewItem.objects.filter(queue__in=queues)
                .annotate(n=Count("labels", filter=Q(labels__skipped=False))).values_list("queue_id", "n"))
    out = {q.pk: {"items": 0, "complete": 0} for q in queues}
    need = {q.pk: q.reviewers_per_item for q in queues}
    for queue_id, n in per_item:
        out[queue_id]["items"] += 1
        out[queue_id]["complete"] += int(n >= need[queue_id])
    return [out[q.pk] for q in queues]


def judge_stages(snapshot: dict) -> list[str]:
    """Judge slugs named by a domain version's verifier cascade."""
    stages = ((snapshot or {}).get("verifier") or {}).get("stages") or []
    return [str((s.get("params") or {}).get("judge", "default")) for s in stages if isinstance(s, dict) and s.get("type") == "judge"]


def judges_of(team_id: int | None) -> QuerySet[Judge]:
    """The judges a domain of team ``team_id`` may name: that team's (a global domain's: global
    judges, of which there are none while every judge belongs to a team)."""
    return Judge.objects.filter(team_id=team_id) if team_id is not None else Judge.objects.filter(team__isnull=True)


def judges_visible(*, team_id: int | None, names: list[str]) -> set[str]:
    """Which of ``names`` a domain of team ``team_id`` may name in a judge stage."""
    return set(judges_of(team_id).filter(slug__in=names).values_list("slug", flat=True))


def judges_of_other_teams(*, team_id: int | None, names: list[str]) -> set[str]:
    """Which of ``names`` are judges a domain of team ``team_id`` may not name (another team's)."""
    return set(Judge.objects.filter(slug__in=names).exclude(pk__in=judges_of(team_id).values("pk")).values_list("slug", flat=True))


def run_foreign_judges(*, domains, pins) -> tuple[str, list[tuple[str, str]]] | None:
    """A run's admission check (controlplane.runs.preflight): a pinned domain version whose judge
    stage names another team's judge (saved before domains were held to their team's judges)
    would be verified by that team's judge, which is resolved by name on the judge queue. Each
    such stage is refused in the words the API uses for a judge that is not found."""
    teams = {rd.domain.slug: rd.domain.team_id for rd in domains}
    fields = []
    for pin in pins:
        refs = judge_stage_refs(pin.verifier_spec)
        foreign = judges_of_other_teams(team_id=teams[pin.slug], names=[name for _, name in refs]) if refs else set()
        fields += [(f"domains.{pin.slug}.{path}", f"judge {name!r} not found (a judge stage names a judge of the domain's team)")
                   for path, name in refs if name in foreign]
    return ("a domain names another team's judge", fields) if fields else None


def run_judge_warnings(run) -> list[str]:
    """Warnings for a run's page: a judge its domains use that is missing or not calibrated (a
    judge of another team than the domain's reads as missing: its version and calibration are
    that team's business)."""
    warnings = []
    for rd in run.run_domains.select_related("domain", "domain_version"):
        for slug in judge_stages(rd.domain_version.snapshot):
            judge = judges_of(rd.domain.team_id).select_related("active").filter(slug=slug).first()
            if judge is None or judge.active is None:
                warnings.append(f"domain {rd.domain.slug} uses judge {slug!r}, which is not configured: its verifications are judge errors")
            elif not judge.active.is_calibrated:
                warnings.append(f"domain {rd.domain.slug} uses judge {slug} v{judge.active.version}, which is not calibrated: "
                                f"its rewards have not been checked against human labels")
    return warnings
