"""``python manage.py temper ...``: the API's operations from a terminal.

Acts as ``--user`` (or $TEMPER_USER), with that user's roles, through the same services as the
API, so permissions, validation and the audit log are the same.
"""
from __future__ import annotations

import argparse
import json
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from tqdm import tqdm

from controlplane.accounts import selectors as account_selectors
from controlplane.accounts import services as account_services
from controlplane.accounts.cli import ServiceCommand
from controlplane.accounts.models import Team
from controlplane.common.cli import assignments, parse_value, read_data_file, table
from controlplane.domains import selectors as domain_selectors
from controlplane.domains import services as domain_services
from controlplane.runs import selectors as run_selectors
from controlplane.runs import services as run_services
from controlplane.runs.models import TERMINAL_STATES
from controlplane.runs.ceilings import team_ceilings
from controlplane.runs.cost import amount_text
from controlplane.scheduling.models import PoolKind, ResourcePool, TeamQuota
from controlplane.scheduling.selectors import gpu_quota_note
from controlplane.scheduling.services import pool_set, team_quota_set


class Command(ServiceCommand):
    help = "Temper's command-line interface: teams, domains, runs, tokens, quotas, the audit log and the model registry."

    def add_commands(self, sub):
        teams = sub.add_parser("teams", help="teams and members").add_subparsers(dest="action", required=True)
        teams.add_parser("list")
        p = teams.add_parser("create"); p.add_argument("slug"); p.add_argument("--name", default="")
        p = teams.add_parser("add-member"); p.add_argument("team"); p.add_argument("username"); p.add_argument("role")

        domains = sub.add_parser("domains", help="the domain registry").add_subparsers(dest="action", required=True)
        p = domains.add_parser("list"); p.add_argument("--q", default=""); p.add_argument("--kind", default="")
        p = domains.add_parser("show"); p.add_argument("slug")
        p = domains.add_parser("versions"); p.add_argument("slug")
        p = domains.add_parser("diff"); p.add_argument("slug"); p.add_argument("a", type=int); p.add_argument("b", type=int)
        p = domains.add_parser("set", help="change fields: temper domains set SLUG priority=80 max_share=0.5")
        p.add_argument("slug"); p.add_argument("changes", nargs="+", metavar="FIELD=JSON"); p.add_argument("--note", default="")

        runs = sub.add_parser("runs", help="runs").add_subparsers(dest="action", required=True)
        p = runs.add_parser("list"); p.add_argument("--state", default=""); p.add_argument("--team", default="")
        for name in ("show", "start", "pause", "resume", "cancel"):
            runs.add_parser(name).add_argument("run_id", type=int)
        p = runs.add_parser("validate"); p.add_argument("file")
        p = runs.add_parser("create"); p.add_argument("file"); p.add_argument("--start", action="store_true")
        p = runs.add_parser("priority"); p.add_argument("run_id", type=int); p.add_argument("priority", type=int)
        p = runs.add_parser("weights"); p.add_argument("run_id", type=int); p.add_argument("weights", nargs="+", metavar="SLUG=WEIGHT")
        p = runs.add_parser("metrics"); p.add_argument("run_id", type=int); p.add_argument("--after", type=int, default=0); p.add_argument("--limit", type=int, default=100)
        p = runs.add_parser("watch", help="a progress bar until the run ends"); p.add_argument("run_id", type=int); p.add_argument("--interval", type=float, default=1.0)

        tokens = sub.add_parser("tokens", help="API tokens").add_subparsers(dest="action", required=True)
        tokens.add_parser("list")
        p = tokens.add_parser("create"); p.add_argument("--team", required=True); p.add_argument("--name", required=True)
        p.add_argument("--role", default=None); p.add_argument("--days", type=int, default=30)
        p = tokens.add_parser("revoke"); p.add_argument("token_id", type=int)

        p = sub.add_parser("audit", help="the audit log"); p.add_argument("--type", default=""); p.add_argument("--id", default=""); p.add_argument("--limit", type=int, default=50)

        quota = sub.add_parser("quota", help="team quotas").add_subparsers(dest="action", required=True)
        p = quota.add_parser("set"); p.add_argument("team"); p.add_argument("--gpus", type=int); p.add_argument("--runs", type=int)
        p.add_argument("--ceiling", action="append", default=[], metavar="PATH=VALUE",
                       help="the most the team's runs may use of a trainer setting or size, e.g. rollout.n=64 "
                            "sequences_per_step=4096 (added to the team's ceilings; repeat it)")
        p.add_argument("--clear-ceilings", action="store_true", help="remove the team's ceilings first")
        p = quota.add_parser("show"); p.add_argument("team")

        pools = sub.add_parser("pools", help="resource pools and their prices").add_subparsers(dest="action", required=True)
        pools.add_parser("list")
        p = pools.add_parser("set", help="create a pool or change it (what is left out keeps its value)"); p.add_argument("name")
        p.add_argument("--kind", choices=[k.value for k in PoolKind]); p.add_argument("--capacity", type=int)
        p.add_argument("--description"); p.add_argument("--price", help="in TEMPER_CURRENCY a GPU-hour, CPU-hour, "
                                                                     "sandbox-hour or million judge tokens, by kind; 'none' unsets it")

        # Everything after "registry" is the registry command's own arguments, its --help included:
        # this parser has no options (no prefix character it would recognise), so none is taken as its.
        p = sub.add_parser("registry", add_help=False, prefix_chars="\x00", help="the model registry: versions, eval "
                           "suites, evaluations, comparison, aliases, rollback, export (temper registry --help)")
        p.add_argument("registry_args", nargs=argparse.REMAINDER)

    # -- plumbing ---------------------------------------------------------------------------

    # -- teams ------------------------------------------------------------------------------
    def do_teams_list(self, o):
        teams = account_selectors.team_list(actor=self.actor)
        self.out(table([(t.slug, t.name, self.actor.role_in(t.id)) for t in teams], ["team", "name", "your role"]))

    def do_teams_create(self, o):
        self.actor.require_platform_admin("creating teams")
        team = account_services.team_create(slug=o["slug"], name=o["name"], admin=self.actor.user)
        self.out(f"created team {team.slug}; you are its admin")

    def do_teams_add_member(self, o):
        team = account_selectors.team_get(actor=self.actor, slug=o["team"])
        m = account_services.membership_set(actor=self.actor, team=team, username=o["username"], role=o["role"])
        self.out(f"{m.user.username} is now {m.role} in {team.slug}")

    # -- domains ----------------------------------------------------------------------------
    def do_domains_list(self, o):
        qs = domain_selectors.domain_list(actor=self.actor, search=o["q"], kind=o["kind"])
        self.out(table([(d.slug, d.kind, d.family, f"v{d.version}", d.priority, d.max_share, d.title) for d in qs],
                       ["slug", "kind", "family", "version", "priority", "max share", "title"]))

    def do_domains_show(self, o):
        d = domain_selectors.domain_get(actor=self.actor, slug=o["slug"])
        self.out(json.dumps({"slug": d.slug, "version": d.version, **d.snapshot()}, indent=2, default=str))

    def do_domains_versions(self, o):
        d = domain_selectors.domain_get(actor=self.actor, slug=o["slug"])
        self.out(table([(f"v{v.version}", v.created_at.strftime("%Y-%m-%d %H:%M"), v.created_by or "", v.note) for v in d.versions.all()],
                       ["version", "at", "by", "note"]))

    def do_domains_diff(self, o):
        d = domain_selectors.domain_get(actor=self.actor, slug=o["slug"])
        rows = domain_selectors.domain_version_diff(domain=d, a=o["a"], b=o["b"])
        self.out(table([(r["path"], json.dumps(r["before"]), json.dumps(r["after"])) for r in rows], ["field", f"v{o['a']}", f"v{o['b']}"]))

    def do_domains_set(self, o):
        d = domain_selectors.domain_get(actor=self.actor, slug=o["slug"])
        d = domain_services.domain_update(actor=self.actor, domain=d, changes=assignments(o["changes"]), note=o["note"])
        self.out(f"{d.slug} is now at v{d.version}")

    # -- runs -------------------------------------------------------------------------------
    def _run_rows(self, runs):
        return [(r.id, r.team.slug, r.state, f"{r.current_step}/{r.budget_steps}", r.priority, r.name) for r in runs]

    def do_runs_list(self, o):
        runs = run_selectors.run_list(actor=self.actor, state=o["state"], team=o["team"])[:200]
        self.out(table(self._run_rows(runs), ["id", "team", "state", "step", "priority", "name"]))

    def do_runs_show(self, o):
        r = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        self.out(table(self._run_rows([r]), ["id", "team", "state", "step", "priority", "name"]))
        self.out("\ndomains:")
        self.out(table([(rd.domain.slug, f"v{rd.domain_version.version}", rd.weight) for rd in r.run_domains.select_related("domain", "domain_version")],
                       ["domain", "version", "weight"]))
        self.out("\nevents:")
        self.out(table([(e.at.strftime("%H:%M:%S"), e.kind, e.message) for e in run_selectors.event_list(run=r)], ["at", "kind", "message"]))

    def do_runs_validate(self, o):
        plan = run_services.run_validate(actor=self.actor, data=read_data_file(o["file"]))
        d = plan.as_dict()
        self.out(f"valid: team {d['team']}, {len(d['domains'])} domains")
        self.out(table([(x["slug"], f"v{x['version']}", x["weight"], f"{x['share']:.1%}") for x in d["domains"]], ["domain", "version", "weight", "share"]))

    def do_runs_create(self, o):
        run = run_services.run_create(actor=self.actor, data=read_data_file(o["file"]))
        if o["start"]:
            run = run_services.run_start(actor=self.actor, run=run)
        self.out(f"created run {run.id} ({run.state})")

    def _control(self, o, action):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        run = action(actor=self.actor, run=run)
        self.out(f"run {run.id}: {run.state}")

    def do_runs_start(self, o):
        self._control(o, run_services.run_start)

    def do_runs_pause(self, o):
        self._control(o, run_services.run_pause)

    def do_runs_resume(self, o):
        self._control(o, run_services.run_resume)

    def do_runs_cancel(self, o):
        self._control(o, run_services.run_cancel)

    def do_runs_priority(self, o):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        run = run_services.run_set_priority(actor=self.actor, run=run, priority=o["priority"])
        self.out(f"run {run.id}: priority {run.priority}")

    def do_runs_weights(self, o):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        weights = {}
        for item in o["weights"]:
            slug, _, raw = item.partition("=")
            weights[slug] = parse_value(raw)
        run_services.run_set_weights(actor=self.actor, run=run, weights=weights)
        self.out(f"run {run.id}: weights {weights}")

    def do_runs_metrics(self, o):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        points, cursor = run_selectors.metrics_after(run=run, cursor=o["after"], limit=o["limit"])
        self.out(table([(p["id"], p["step"], p["domain"], p["key"], f"{p['value']:.4g}") for p in points],
                       ["cursor", "step", "domain", "key", "value"]))
        self.out(f"next cursor: {cursor}")

    def do_runs_watch(self, o):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        with tqdm(total=run.budget_steps, desc=f"run {run.id}", unit="step", initial=run.current_step) as bar:
            while True:
                run.refresh_from_db()
                bar.n = run.current_step
                bar.set_postfix_str(run.state)
                bar.refresh()
                if run.state in TERMINAL_STATES:
                    break
                time.sleep(o["interval"])
        self.out(f"run {run.id} ended: {run.state}")

    # -- the model registry -------------------------------------------------------------------
    def do_registry(self, o):
        """``temper registry ...`` is ``manage.py registry ...``, as the same user."""
        call_command("registry", "--user", self.actor.user.username, *o["registry_args"], stdout=self.stdout, stderr=self.stderr)

    # -- tokens, audit, quotas ---------------------------------------------------------------
    def do_tokens_list(self, o):
        rows = [(t.id, t.prefix + "…", t.name, t.team.slug, t.role, t.expires_at.strftime("%Y-%m-%d"), "revoked" if t.revoked_at else "")
                for t in account_selectors.token_list(actor=self.actor)]
        self.out(table(rows, ["id", "token", "name", "team", "role", "expires", ""]))

    def do_tokens_create(self, o):
        team = account_selectors.team_get(actor=self.actor, slug=o["team"])
        token, secret = account_services.token_create(actor=self.actor, team=team, name=o["name"], role=o["role"], expires_in_days=o["days"])
        self.out(f"token {token.id} for {team.slug} as {token.role}, expires {token.expires_at:%Y-%m-%d}.")
        self.out("It is shown once; store it now:")
        self.out(secret)

    def do_tokens_revoke(self, o):
        token = account_services.token_revoke(actor=self.actor, token_id=o["token_id"])
        self.out(f"token {token.id} revoked")

    def do_audit(self, o):
        rows = account_selectors.audit_list(actor=self.actor, object_type=o["type"], object_id=o["id"])[: o["limit"]]
        self.out(table([(a.at.strftime("%Y-%m-%d %H:%M:%S"), a.actor_name, a.action, f"{a.object_type}:{a.object_id}", json.dumps(a.after)[:60])
                        for a in rows], ["at", "actor", "action", "object", "after"]))

    def do_quota_set(self, o):
        team = Team.objects.filter(slug=o["team"]).first()
        if team is None:
            raise CommandError(f"no team {o['team']!r}")
        changes = {k: v for k, v in (("max_gpus", o["gpus"]), ("max_concurrent_runs", o["runs"])) if v is not None}
        if o["ceiling"] or o["clear_ceilings"]:
            current = {} if o["clear_ceilings"] else team_ceilings(team)
            changes["ceilings"] = {**current, **assignments(o["ceiling"])}
        q = team_quota_set(actor=self.actor, team=team, changes=changes)
        self._quota_out(q)

    def do_quota_show(self, o):
        team = account_selectors.team_get(actor=self.actor, slug=o["team"])
        q, _ = TeamQuota.objects.get_or_create(team=team)
        self._quota_out(q)

    # -- pools ------------------------------------------------------------------------------
    def do_pools_list(self, o):
        self.out(table([(p.name, p.kind, p.capacity, "not set" if p.price is None else f"{amount_text(p.price)} {settings.TEMPER_CURRENCY}",
                         p.price_unit, p.description) for p in ResourcePool.objects.all()],
                       ["pool", "kind", "capacity", "price", "per", "description"]))

    def do_pools_set(self, o):
        pool = ResourcePool.objects.filter(name=o["name"]).first()
        data = {} if pool is None else {"kind": pool.kind, "capacity": pool.capacity}
        data.update({k: o[k] for k in ("kind", "capacity", "description") if o[k] is not None})
        if o["price"] is not None:
            data["price"] = None if o["price"].strip().lower() == "none" else o["price"]
        pool = pool_set(actor=self.actor, name=o["name"], data=data)
        price = "no price" if pool.price is None else f"{amount_text(pool.price)} {settings.TEMPER_CURRENCY} a {pool.price_unit}"
        self.out(f"pool {pool.name}: {pool.kind} x{pool.capacity}, {price}")

    def _quota_out(self, q):
        self.out(f"{q.team.slug}: {q.max_gpus} GPUs, {q.max_concurrent_runs} concurrent runs")
        if note := gpu_quota_note(q.max_gpus):
            self.out(f"warning: {note}")
        if q.ceilings:
            self.out(table(sorted(q.ceilings.items()), ["ceiling", "at most"]))
