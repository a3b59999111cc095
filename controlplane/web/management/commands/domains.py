"""``python manage.py domains sync``: register the trainer's catalogue as Domains and versions.
``python manage.py domains audit [SLUG...]``: run the verifier audit of the current versions here.
``python manage.py domains build-swe [PKG...]``: build the swe-pkg task sets of pinned packages here
(``temper.pkgs.build`` by name, one package at a time; each package's file is written when it is done).

Running sync twice changes nothing: a domain whose catalogue entry is unchanged keeps its version.
Every new version gets a verifier audit requested (a verify worker runs it).
"""
from __future__ import annotations

import argparse
import logging
import signal
import threading
from contextlib import contextmanager

from celery.exceptions import SoftTimeLimitExceeded
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from controlplane import dispatch
from controlplane.accounts.principal import SYSTEM
from controlplane.common.cli import table
from controlplane.common.errors import InvalidInput
from controlplane.domains import services
from controlplane.domains.models import AuditStatus, Domain, DomainVersion
from controlplane.domains.services import AUDIT_TASK, domain_sync, verifier_audit_request
from trainer.catalogue import code_domains
from trainer.families.pkgs.pins import PINS


def catalogue_specs(only: list[str] | None = None) -> list[dict]:
    """The domains the trainer's code defines, as plain Domain fields (not the uploads this
    process registered for a run: those are rows already, and an upload is never synced)."""

    specs = []
    for slug, spec in sorted(code_domains().items()):
        if only and slug not in only:
            continue
        if not spec.verifier_spec:
            raise CommandError(f"domain {slug!r} has no verifier_spec: the control plane stores every verifier as a cascade")
        specs.append({
            "slug": spec.slug,
            "title": spec.title,
            "kind": spec.kind,
            "family": spec.family,
            "description": spec.description,
            "task_source": spec.task_source_spec or {"family": spec.family},
            "verifier": spec.verifier_spec,
        })
    return specs


EXAMPLES_PER_CLASS = 3
"""Failing examples printed per probe class with ``-v 2``."""
BUILD_TASK = "temper.pkgs.build"
"""The task that builds one package's swe-pkg task set (workers/pkgs_build.py)."""
AUDIT_TIMEOUT_S = 600.0
"""``domains audit``'s time limit per domain. In a worker the task's soft time limit does this; a
task run in this process has none, and one domain whose task generator never returns would hold
the whole command."""


@contextmanager
def time_limit(seconds: float):
    """Raise Celery's ``SoftTimeLimitExceeded`` in this (main) thread after ``seconds``, as a
    worker's soft time limit would: the audit task records it as a failed audit and goes on."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise SoftTimeLimitExceeded(f"the audit ran longer than {seconds:g} s (domains audit --timeout)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _why(audit) -> str:
    """The classes with false positives, or the last line of a failed audit's error."""
    if audit.status == AuditStatus.DONE:
        return ", ".join(audit.false_positive_classes)
    lines = audit.error.strip().splitlines()
    return lines[-1][:100] if lines else ""


class Command(BaseCommand):
    help = ("Manage the domain registry. `domains sync` registers the trainer's catalogue; "
            "`domains audit [SLUG...]` runs the verifier audit of the current versions in this process.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("sync", help="create or update the catalogue's domains (idempotent); new versions get an audit")
        p.add_argument("--only", nargs="*", help="only these slugs")
        p.add_argument("--no-progress", action="store_true")
        p = sub.add_parser("audit", help="audit the current versions of these domains (all when none) here; "
                                         "exit status 1 when a false positive is found, 2 when an audit failed")
        p.add_argument("slugs", nargs="*", metavar="SLUG")
        p.add_argument("--no-progress", action="store_true")
        p.add_argument("--timeout", type=float, default=AUDIT_TIMEOUT_S, metavar="SECONDS",
                       help=f"a domain whose audit runs longer fails with a time limit (default {AUDIT_TIMEOUT_S:.0f}; 0: none)")
        # `domains audit SLUG -v 2` as well as `domains -v 2 audit SLUG`: with -v 2 the failing examples.
        p.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], default=argparse.SUPPRESS,
                       help="2: also print the failing examples of each probe class")

        p = sub.add_parser("build-swe", help="build the swe-pkg task sets of these pinned packages (all when none) "
                                             "in the sandbox, writing trainer/families/pkgs/tasks/<pkg>.json.gz")
        p.add_argument("packages", nargs="*", metavar="PKG")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--no-progress", action="store_true")

    def handle(self, *args, **opts):
        if opts["action"] == "build-swe":
            return self.build_swe(opts["packages"], seed=opts["seed"], progress=not opts["no_progress"])
        if opts["action"] == "audit":
            return self.audit(opts["slugs"], progress=not opts["no_progress"], verbosity=opts["verbosity"], timeout=opts["timeout"])
        specs = catalogue_specs(opts.get("only"))
        if not specs:
            raise CommandError("the trainer's catalogue has no domains" + (" with those slugs" if opts.get("only") else ""))
        with tqdm(total=len(specs), desc="domains sync", unit="domain", disable=opts["no_progress"]) as bar:
            try:
                counts = domain_sync(actor=SYSTEM, specs=specs, progress=bar.update)
            except InvalidInput as exc:
                raise CommandError("a catalogue entry is invalid:\n  " + "\n  ".join(map(str, exc.errors))) from None
        self.stdout.write(f"{len(specs)} domains: {counts['created']} created, {counts['updated']} updated, {counts['unchanged']} unchanged")
        if counts["created"] + counts["updated"]:
            self.stdout.write(f"{counts['created'] + counts['updated']} verifier audits requested (a verify worker runs them; "
                              "`manage.py domains audit` runs them here)")

    def audit(self, slugs: list[str], *, progress: bool, verbosity: int, timeout: float = 0.0) -> None:
        """Audit each domain's current version in this process, as a verify worker would (by task
        name, ``dispatch.run_here``); a table, the failing examples with ``-v 2``, and an exit
        status that says whether any version is unsafe."""

        domains = Domain.objects.order_by("slug")
        if slugs:
            domains = domains.filter(slug__in=slugs)
            missing = sorted(set(slugs) - set(domains.values_list("slug", flat=True)))
            if missing:
                raise CommandError(f"no such domain: {', '.join(missing)} (run `manage.py domains sync` first?)")
        domains = list(domains)
        if not domains:
            raise CommandError("no domains to audit (run `manage.py domains sync` first)")
        versions = {v.domain_id: v for v in DomainVersion.objects.filter(domain__in=domains).select_related("domain")
                    if v.version == v.domain.version}
        audits = []
        trace = logging.getLogger("celery.app.trace")  # "Task ... succeeded" lines would break the bar
        level = trace.level
        trace.setLevel(logging.WARNING)
        try:
            with tqdm(total=len(domains), desc="verifier audit", unit="domain", disable=not progress) as bar:
                for domain in domains:
                    bar.set_postfix_str(domain.slug)
                    audit = verifier_audit_request(actor=SYSTEM, version=versions[domain.id], note="manage.py domains audit",
                                                   enqueue=False)
                    try:
                        with time_limit(timeout):
                            dispatch.run_here(AUDIT_TASK, audit.pk)
                    except SoftTimeLimitExceeded as exc:  # it struck outside the task's own handler
                        services.verifier_audit_record(audit=audit, error=str(exc))
                    audit.refresh_from_db()
                    audits.append(audit)
                    bar.update(1)
        finally:
            trace.setLevel(level)
        rows = [(a.domain_version.domain.slug, f"v{a.domain_version.version}", a.status, a.probes, a.false_positives,
                 a.false_negatives_gold, a.false_negatives_equivalent, a.masked, _why(a))
                for a in audits]
        self.stdout.write(table(rows, ["domain", "version", "status", "probes", "false positives", "fn gold",
                                       "fn equivalent", "masked", "classes / error"]))
        if verbosity >= 2:
            for a in audits:
                self._examples(a)
        unsafe = [a for a in audits if a.is_unsafe]
        failed = [a for a in audits if a.status != AuditStatus.DONE]
        total = sum(a.probes or 0 for a in audits)
        self.stdout.write(f"{len(audits)} domains, {total} probes: {sum(a.false_positives or 0 for a in audits)} false positives "
                          f"in {len(unsafe)} domains, {sum(a.false_negatives_gold or 0 for a in audits)} gold answers failing, "
                          f"{len(failed)} audits failed")
        if unsafe:
            raise CommandError("false positives in: " + ", ".join(a.domain_version.domain.slug for a in unsafe), returncode=1)
        if failed:
            raise CommandError("audits failed: " + ", ".join(a.domain_version.domain.slug for a in failed), returncode=2)

    def build_swe(self, packages: list[str], *, seed: int, progress: bool) -> None:
        """Build each package's task set in this process, one at a time (by task name,
        ``dispatch.run_here``), and print its figures."""
        names = packages or sorted(PINS)
        unknown = sorted(set(names) - set(PINS))
        if unknown:
            raise CommandError(f"not pinned: {', '.join(unknown)} (known: {', '.join(sorted(PINS))})")
        rows = []
        trace = logging.getLogger("celery.app.trace")
        level = trace.level
        trace.setLevel(logging.WARNING)
        try:
            with tqdm(total=len(names), desc="build-swe", unit="package", disable=not progress) as bar:
                for name in names:
                    bar.set_postfix_str(name)
                    f = dispatch.run_here(BUILD_TASK, name, seed)
                    levels = f["levels"]
                    rows.append((name, f["tasks"], levels["1"], levels["2"], levels["3"], f["tried"], f["kept"], f["seconds"]))
                    bar.update(1)
        finally:
            trace.setLevel(level)
        self.stdout.write(table(rows, ["package", "tasks", "level 1", "level 2", "level 3", "mutants tried", "kept", "seconds"]))
        self.stdout.write(f"{sum(r[1] for r in rows)} tasks over {len(rows)} packages")

    def _examples(self, audit) -> None:
        """Each probe class's failing examples (false positives, then false negatives)."""
        for name, row in sorted((audit.report.get("classes") or {}).items()):
            if not (row.get("false_positives") or row.get("false_negatives")):
                continue
            self.stdout.write(f"\n{audit.domain_version.domain.slug} v{audit.domain_version.version} · {name}: "
                              f"{row.get('false_positives', 0)} false positives, {row.get('false_negatives', 0)} false negatives "
                              f"of {row.get('probes', 0)} probes")
            for ex in (row.get("examples") or [])[:EXAMPLES_PER_CLASS]:
                completion = str(ex.get("completion", ""))
                completion = completion if len(completion) <= 200 else completion[:200] + f"... ({len(completion)} chars)"
                self.stdout.write(f"  task {ex.get('task_id')}: expected {ex.get('expect', '?')}, got {ex.get('outcome')} "
                                  f"(score {ex.get('score')}){' - ' + ex['note'] if ex.get('note') else ''}\n"
                                  f"    {completion!r}")
        if audit.status == AuditStatus.FAILED:
            self.stdout.write(f"\n{audit.domain_version.domain.slug} v{audit.domain_version.version}: the audit failed\n{audit.error}")
