"""Prepare the embedded-default demo: an admin, a team, the catalogue, an auto-evaluating eval
suite and the demo run. Safe to run again."""
from __future__ import annotations

import io
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from controlplane.accounts.models import Membership, Role, Team
from controlplane.accounts.principal import Principal
from controlplane.domains.models import Domain
from controlplane.domains.selectors import audit_gates
from controlplane.domains.services import verifier_audit_override
from controlplane.registry.services import suite_save
from controlplane.runs.models import Run
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.models import ResourcePool, TeamQuota


DEMO_CONFIG = {
    # 32 prompts x 16 samples a step: with 16 x 8, addition's gain on its 14 held-out tasks was
    # significant in two seeds of four, with 32 x 8 in five runs of six (docs/trainer.md).
    "rollout": {"prompts_per_step": 32, "n": 16, "max_new_tokens": 4, "temperature": 1.0},
    "algorithm": {"name": "grpo", "clip_low": 0.2, "clip_high": 0.28, "updates_per_batch": 2,
                  "dynamic_sampling": True, "max_refills": 2},
    "optimizer": {"lr": 5e-4, "beta2": 0.99, "micro_batch_size": 128, "max_grad_norm": 1.0},
    # A weak base in every domain: each trains until a fifth of its sampled answers pass, then
    # leaves the stage (and comes back if it forgets while the others train); 1,500 steps at most.
    # A fixed 250 steps left reversal at zero (no group ever had a right answer, so RL had no
    # signal) and longer fixed stages solved it for some seeds and not others. At 3e-3 SFT
    # collapsed two-bit parity into a constant answer; 1e-3 does not (docs/trainer.md).
    "sft": {"steps": 1500, "lr": 1e-3, "batch_size": 16, "until_pass_rate": 0.2},
    # Each domain starts at its shortest instances and moves up a level when it passes them.
    "sampler": {"curriculum": True},
    "checkpoint": {"every_steps": 20},  # each checkpoint is evaluated on DEMO_SUITE: the held-out curve
}

DEMO_STEPS = 300
"""GRPO steps of the demo run (after the SFT warm-up)."""

DEMO_DOMAINS = {"builtin-addition": 2.0, "builtin-reversal": 1.0, "builtin-sorting": 1.0}
"""The demo run's domains and weights. Parity is not among them: its held-out strings are lengths
the tiny model never generalises to (docs/trainer.md), so it cannot show held-out learning."""

JUDGED_DOMAIN = "capitals-judged"
JUDGED_OVERRIDE = ("the demo's judged domain: its similarity judge is what reviewers calibrate on this run's answers "
                   "(the review queue), so the run starts before the verifier audit is in")
JUDGED_CONFIG = {
    # An answer is a sentence ("The capital of Argentina is Buenos Aires.": 41 characters).
    "rollout": {"prompts_per_step": 8, "n": 4, "max_new_tokens": 48, "temperature": 1.0},
    # Its own SFT stage on the domain's reference sentences first: from random init every sampled
    # answer is noise the judge fails, and a review queue of them calibrates nothing.
    "sft": {"steps": 150, "lr": 3e-3, "batch_size": 16},
    "checkpoint": {"every_steps": 10},
}
"""The second demo run: a few steps on a judged domain, for the review queues."""

DEMO_SUITE = {
    "slug": "demo-heldout",
    "title": "held-out tasks of the demo's domains, sampled as the policy trains",
    "auto_evaluate": True,
    # Eight samples per task at the training temperature: each task's score is a pass rate, so the
    # few held-out tasks a small domain has (14 of addition's 100) still tell a change apart.
    "items": [
        {"domain": "builtin-addition", "tasks": 32, "samples": 8, "temperature": 1.0, "k": [1, 8], "max_new_tokens": 4},
        {"domain": "builtin-reversal", "tasks": 64, "samples": 8, "temperature": 1.0, "k": [1, 8], "max_new_tokens": 4},
        {"domain": "builtin-sorting", "tasks": 64, "samples": 8, "temperature": 1.0, "k": [1, 8], "max_new_tokens": 4},
    ],
}
"""Every checkpoint of the demo (and its base model) is evaluated on this suite as it is saved,
so ``/registry/compare/?run=ID`` compares the run's first and last checkpoint."""


class Command(BaseCommand):
    help = "Create the demo admin (credentials printed and kept in var/demo_credentials), team and domains."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--no-run", action="store_true", help="do not create and start the demo run")

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
        if not opts["no_run"] and not Run.objects.filter(team=team).exists():
            run = self._demo_run(user, team)
            self.stdout.write(demo_run_message(run))
            judged = self._judged_run(user, team, run.base_model)
            self.stdout.write(judged_run_message(judged, team))
        self.stdout.write(self.style.SUCCESS(f"demo admin: username {username}  password {password}"))

    def _judged_run(self, user, team, base_model: str) -> Run:
        """A short run on a domain a model judges (the similarity judge of the review app), so the
        review pages have judged trajectories to sample, label and calibrate against."""
        return judged_run(user=user, team=team, base_model=base_model, stdout=self.stdout)

    def _demo_run(self, user, team):
        model_dir = settings.VAR_DIR / "models" / "tiny-demo"
        if not (model_dir / "config.json").exists():
            from trainer.models.tiny import build_tiny  # lazy: torch, only when the demo model is not built yet

            build_tiny(model_dir)
        return demo_run(user=user, team=team, model_dir=model_dir)


def _names(slugs) -> str:
    """Domains as a sentence names them.

    >>> _names(["builtin-addition", "builtin-reversal", "builtin-sorting"])
    'addition, reversal and sorting'
    """
    names = [slug.removeprefix("builtin-") for slug in slugs]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def demo_run_message(run: Run) -> str:
    """What the demo run does, from its own settings."""
    domains = [rd.domain.slug for rd in run.run_domains.select_related("domain").order_by("id")] or list(DEMO_DOMAINS)
    return (f"demo run {run.id} queued: the tiny model is made a weak base by SFT, then trains {run.budget_steps} GRPO "
            f"steps on {_names(domains)}, each domain moving up a level as it passes; its checkpoints are evaluated "
            f"on the suite {DEMO_SUITE['slug']} (compare them at /registry/compare/?run={run.id})")


def judged_run_message(run: Run, team: Team) -> str:
    """What the judged run does and, in the order a reviewer takes them, the review steps after it."""
    judge = f"{team.slug}-similarity"
    return (f"judged run {run.id} queued: {run.budget_steps} steps on {JUDGED_DOMAIN}, whose answers the judge {judge} "
            f"scores (the demo admin let it start before the domain's verifier audit is in: a judge is what reviewers "
            f"calibrate). Once it has completed (/runs/{run.id}/): 1. sample a review queue at /review/ (domain "
            f"{JUDGED_DOMAIN}, judge {judge}; or `manage.py review queues create {team.slug} domain={JUDGED_DOMAIN} "
            f"judge={judge} name=first strategy=stratified size=40`), 2. label its items (keys p or 1 pass, f or 0 fail, u undoes), "
            f"3. read the judge's agreement and calibration on the queue's page")


def judged_run(*, user, team: Team, base_model: str, stdout=None) -> Run:
    """The review demo's judge and domain (``review demo setup``, its own instructions left out:
    the demo starts the run they ask for), then a short run on the domain from ``base_model`` (the
    demo's tiny model, SFT'd on the domain's references first)."""
    call_command("review", "--user", user.username, "demo", "setup", team.slug, "--slug", JUDGED_DOMAIN, stdout=io.StringIO())
    actor = Principal.for_user(user)
    # Audits gate every use of a version, and a judge's scores are what this run exists to have
    # reviewed: the demo admin lets it start before its audit is in (audited, with this reason).
    # The audit goes on; if it finds false positives the override lapses and a new run on the
    # domain waits for an admin's decision on what it found.
    domain = Domain.objects.get(slug=JUDGED_DOMAIN)
    version = domain.versions.get(version=domain.version)
    if audit_gates(versions=[version])[version.id].verdict != "ok":
        verifier_audit_override(actor=actor, version=version, reason=JUDGED_OVERRIDE)
    run = run_create(actor=actor, data={
        "team": team.slug, "name": "demo: judged capitals (for review)", "base_model": base_model,
        "domains": [{"slug": JUDGED_DOMAIN, "weight": 1.0}], "budget": {"steps": 20}, "priority": 40,
        "config": JUDGED_CONFIG,
    })
    return run_start(actor=actor, run=run)


def demo_run(*, user, team: Team, model_dir: Path, steps: int = DEMO_STEPS) -> Run:
    """Save the demo's held-out suite (auto-evaluating), then create and start the demo run: a
    tiny Llama built here (no hub), made a weak base by SFT, then GRPO on the built-in domains.
    The suite comes first, so every checkpoint the run saves (and its base model) is evaluated."""
    actor = Principal.for_user(user)
    suite_save(actor=actor, data={**DEMO_SUITE, "team": team.slug})
    run = run_create(actor=actor, data={
        "team": team.slug,
        "name": "demo: tiny model on the built-in domains",
        "base_model": str(model_dir),
        "domains": [{"slug": slug, "weight": weight} for slug, weight in DEMO_DOMAINS.items()],
        "budget": {"steps": steps},
        "config": DEMO_CONFIG,
    })
    return run_start(actor=actor, run=run)
