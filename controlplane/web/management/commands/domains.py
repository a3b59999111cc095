"""``python manage.py domains sync``: register the trainer's catalogue as Domains and versions.

Running it twice changes nothing: a domain whose catalogue entry is unchanged keeps its version.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from controlplane.accounts.principal import SYSTEM
from controlplane.common.errors import InvalidInput
from controlplane.domains.services import domain_sync


def catalogue_specs(only: list[str] | None = None) -> list[dict]:
    """The trainer's registered domains as plain Domain fields."""
    from trainer.registry import all_domains

    specs = []
    for slug, spec in sorted(all_domains().items()):
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
            "sandbox": spec.sandbox_spec or {},
        })
    return specs


class Command(BaseCommand):
    help = "Manage the domain registry. `domains sync` registers the trainer's catalogue."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("sync", help="create or update the catalogue's domains (idempotent)")
        p.add_argument("--only", nargs="*", help="only these slugs")
        p.add_argument("--no-progress", action="store_true")

    def handle(self, *args, **opts):
        from tqdm import tqdm

        specs = catalogue_specs(opts.get("only"))
        if not specs:
            raise CommandError("the trainer's catalogue has no domains" + (" with those slugs" if opts.get("only") else ""))
        with tqdm(total=len(specs), desc="domains sync", unit="domain", disable=opts["no_progress"]) as bar:
            try:
                counts = domain_sync(actor=SYSTEM, specs=specs, progress=bar.update)
            except InvalidInput as exc:
                raise CommandError("a catalogue entry is invalid:\n  " + "\n  ".join(map(str, exc.errors))) from None
        self.stdout.write(f"{len(specs)} domains: {counts['created']} created, {counts['updated']} updated, {counts['unchanged']} unchanged")
