"""``python manage.py registry ...``: model versions, eval suites, evaluations, comparison,
aliases (with the promotion gate), rollback and export, through the same services as the API.

Acts as ``--user`` (or $TEMPER_USER), like ``manage.py temper``.
"""
from __future__ import annotations

import json
import time

from django.core.management.base import CommandError

from controlplane import dispatch
from controlplane.accounts.cli import ServiceCommand
from controlplane.accounts.models import Team
from controlplane.common.cli import read_data_file, table
from controlplane.common.errors import ServiceError
from controlplane.registry import aliases, selectors, services
from controlplane.registry.models import ALIASES, EvalState
from controlplane.runs import selectors as run_selectors


def _fmt(x, spec=".3f") -> str:
    return "" if x is None else format(x, spec)


class Command(ServiceCommand):
    help = "The model registry: versions, eval suites, evaluations, comparison, aliases, rollback, export."

    def add_commands(self, sub):
        p = sub.add_parser("versions", help="list model versions"); p.add_argument("--team", default=""); p.add_argument("--base", default=""); p.add_argument("--run", type=int)
        p = sub.add_parser("show", help="a version and its lineage"); p.add_argument("version", help="id, name (tiny@12/40) or alias (tiny:production)")
        p = sub.add_parser("register", help="register a run's checkpoints that are not versions yet"); p.add_argument("run_id", type=int)
        sub.add_parser("suites", help="list eval suites")
        p = sub.add_parser("suite-save", help="create a suite or a new version of it from a YAML/JSON file"); p.add_argument("file")
        p = sub.add_parser("suite-show"); p.add_argument("slug"); p.add_argument("--version", type=int)
        p = sub.add_parser("suite-for-run", help="a suite of held-out tasks of a run's domains")
        p.add_argument("run_id", type=int); p.add_argument("--slug", default=""); p.add_argument("--tasks", type=int, default=32)
        p.add_argument("--max-new-tokens", type=int, default=0); p.add_argument("--auto", action="store_true", help="evaluate every new version on it")
        p = sub.add_parser("evaluate", help="evaluate a version on a suite (a job on the eval queue)")
        p.add_argument("version"); p.add_argument("--suite", required=True); p.add_argument("--suite-version", type=int)
        p.add_argument("--engine", default="torch", choices=["torch", "vllm"])
        p.add_argument("--wait", action="store_true", help="wait for the result")
        p.add_argument("--here", action="store_true", help="run it in this process instead of on the eval queue")
        p = sub.add_parser("evals", help="list evaluations"); p.add_argument("--version", default="")
        p = sub.add_parser("eval-show", help="an evaluation's per-domain results"); p.add_argument("eval_id", type=int)
        p = sub.add_parser("compare", help="compare versions per domain and layer (the first is the baseline)")
        p.add_argument("versions", nargs="+"); p.add_argument("--suite", default=""); p.add_argument("--suite-version", type=int)
        p.add_argument("--json", action="store_true")
        sub.add_parser("aliases", help="where every alias points")
        p = sub.add_parser("alias", help="move an alias (production is gated)")
        p.add_argument("name", choices=ALIASES); p.add_argument("version")
        p.add_argument("--override", action="store_true", help="team admins: promote past the gate (needs --reason)")
        p.add_argument("--reason", default=""); p.add_argument("--suite", default="", help="judge the promotion on this suite only")
        p = sub.add_parser("rollback", help="point an alias back at its previous version")
        p.add_argument("base"); p.add_argument("--alias", default="production", choices=ALIASES); p.add_argument("--team", default="")
        p.add_argument("--reason", default="")
        p = sub.add_parser("history", help="an alias's moves"); p.add_argument("base"); p.add_argument("--alias", default="production", choices=ALIASES)
        p = sub.add_parser("export", help="write a promoted version as a Hugging Face directory")
        p.add_argument("version"); p.add_argument("--dest", default="")

    def describe(self, exc: ServiceError) -> str:
        if not isinstance(exc, aliases.GateRefused):
            return str(exc)
        lines = [f"  {r['domain']} ({r['layer']}, {r['suite']}): {r['delta']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
                 for r in exc.verdict.get("regressions", [])]
        return "\n".join([str(exc), *lines])

    def _version(self, ref: str):
        return selectors.version_get(actor=self.actor, ref=ref)

    # -- versions ---------------------------------------------------------------------------
    def do_versions(self, o):
        qs = selectors.version_list(actor=self.actor, team=o["team"], base=o["base"], run=o["run"])[:500]
        self.out(table([(v.id, v.name, v.team.slug, v.run_id or "", v.step, ",".join(sorted(a.name for a in v.aliases.all())),
                         v.created_at.strftime("%Y-%m-%d %H:%M")) for v in qs],
                       ["id", "name", "team", "run", "step", "aliases", "created"]))

    def do_show(self, o):
        v = self._version(o["version"])
        self.out(json.dumps({"id": v.id, "name": v.name, "team": v.team.slug, "base": v.base, "base_model": v.base_model,
                             "run": v.run_id, "step": v.step, "parent": v.parent.name if v.parent_id else None,
                             "path": v.path, "pinned": v.pinned, "aliases": sorted(a.name for a in v.aliases.all()),
                             "config": v.config}, indent=2, default=str))

    def do_register(self, o):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        self.actor.require(run.team_id, "run.control", "run")
        names = [services.version_register_checkpoint(checkpoint=c).name for c in run.checkpoints.order_by("step")]
        self.out(f"{len(names)} versions: " + ", ".join(names))

    # -- suites and evaluations ------------------------------------------------------------------
    def do_suites(self, o):
        rows = [(s.slug, s.team.slug if s.team_id else "(all)", f"v{s.version}", "yes" if s.auto_evaluate else "", s.title)
                for s in selectors.suite_list(actor=self.actor)]
        self.out(table(rows, ["suite", "team", "version", "auto", "title"]))

    def do_suite_for_run(self, o):
        run = run_selectors.run_get(actor=self.actor, run_id=o["run_id"])
        max_new = o["max_new_tokens"] or int((run.config or {}).get("rollout", {}).get("max_new_tokens", 32))
        items = [{"domain": rd.domain.slug, "tasks": o["tasks"], "max_new_tokens": max_new,
                  "layer": "end_to_end" if rd.domain.kind in services.END_TO_END_KINDS else "capability"}
                 for rd in run.run_domains.select_related("domain")]
        sv = services.suite_save(actor=self.actor, data={"slug": o["slug"] or f"run-{run.id}-heldout", "team": run.team.slug,
                                                         "title": f"held-out tasks of run {run.id}'s domains",
                                                         "auto_evaluate": o["auto"], "items": items})
        self.out(f"suite {sv.suite.slug} is at v{sv.version} ({len(sv.items)} items)" + (", evaluating every new version" if o["auto"] else ""))

    def do_suite_save(self, o):
        sv = services.suite_save(actor=self.actor, data=read_data_file(o["file"]))
        self.out(f"suite {sv.suite.slug} is at v{sv.version} ({len(sv.items)} items)")

    def do_suite_show(self, o):
        sv = selectors.suite_version_get(actor=self.actor, slug=o["slug"], version=o["version"])
        self.out(f"{sv.suite.slug} v{sv.version}")
        self.out(table([(i["layer"], f"{i['domain']}@v{i['domain_version']}", i["tasks"], i["seed"], i["samples"],
                         i["temperature"], ",".join(map(str, i["k"]))) for i in sv.items],
                       ["layer", "domain", "tasks", "seed", "samples", "temperature", "k"]))

    def do_evaluate(self, o):
        v = self._version(o["version"])
        sv = selectors.suite_version_get(actor=self.actor, slug=o["suite"], version=o["suite_version"])
        if o["here"]:
            ev = services.eval_start(actor=self.actor, version=v, suite_version=sv, engine=o["engine"], enqueue=False)
            if ev.held:
                raise CommandError(f"evaluation {ev.id} is held: {ev.held}; it runs on the eval queue once the audits clear it")
            dispatch.run_here("temper.eval.run", ev.pk)
        else:
            ev = services.eval_start(actor=self.actor, version=v, suite_version=sv, engine=o["engine"])
            self.out(f"evaluation {ev.id} of {v.name} on {sv} queued" + (f", held: {ev.held}" if ev.held else ""))
            while o["wait"]:
                ev.refresh_from_db()
                if ev.state in (EvalState.COMPLETED, EvalState.FAILED):
                    break
                time.sleep(1.0)
        ev = selectors.eval_get(actor=self.actor, eval_id=ev.pk)
        if ev.state in (EvalState.COMPLETED, EvalState.FAILED):
            self.do_eval_show({"eval_id": ev.pk})

    def do_evals(self, o):
        v = self._version(o["version"]) if o["version"] else None
        rows = [(e.id, e.version.name, str(e.suite_version), e.engine, e.state, e.created_at.strftime("%Y-%m-%d %H:%M"))
                for e in selectors.eval_list(actor=self.actor, version=v)[:200]]
        self.out(table(rows, ["id", "version", "suite", "engine", "state", "created"]))

    def do_eval_show(self, o):
        ev = selectors.eval_get(actor=self.actor, eval_id=o["eval_id"])
        self.out(f"evaluation {ev.id}: {ev.version.name} on {ev.suite_version} ({ev.engine}): {ev.state}"
                 + (f", held: {ev.held}" if ev.held else ""))
        if ev.error:
            self.out(ev.error.strip().splitlines()[-1])
        self.out(table([(r.layer, r.domain, r.tasks, " ".join(f"pass@{k}={v:.3f}" for k, v in sorted(r.pass_at.items(), key=lambda kv: int(kv[0]))),
                         _fmt(r.mean_reward), " ".join(f"{k}:{n}" for k, n in r.outcomes.items()),
                         f"{r.tokens_per_task:.1f}", f"{r.seconds_per_task:.3f}") for r in ev.results.all()],
                       ["layer", "domain", "tasks", "pass@k", "mean reward", "outcomes", "tokens/task", "s/task"]))

    def do_compare(self, o):
        out = selectors.compare_versions(actor=self.actor, refs=o["versions"], suite=o["suite"], suite_version=o["suite_version"])
        if o["json"]:
            self.out(json.dumps(out, indent=1))
            return
        self.out(f"suite {out['suite']} v{out['suite_version']}; baseline {out['versions'][0]['name']}; 95% bootstrap intervals")
        headers = ["layer", "domain"] + [v["name"] for v in out["versions"]]
        rows = []
        for row in out["rows"]:
            cells = []
            for c in row["cells"]:
                if c["missing"]:
                    cells.append("-")
                    continue
                text = f"{_fmt(c['mean'])} [{_fmt(c['lo'])}, {_fmt(c['hi'])}]"
                if c["delta"] is not None:
                    flag = " REGRESSION" if c["regression"] else (" better" if c["improvement"] else "")
                    text += f" Δ{c['delta']:+.3f} [{_fmt(c['delta_lo'], '+.3f')}, {_fmt(c['delta_hi'], '+.3f')}]{flag}"
                cells.append(text)
            rows.append([row["layer"], row["domain"], *cells])
        self.out(table(rows, headers))

    # -- aliases and export ----------------------------------------------------------------------
    def do_aliases(self, o):
        self.out(table([(a.team.slug, a.base, a.name, a.version.name, a.updated_at.strftime("%Y-%m-%d %H:%M"))
                        for a in selectors.alias_list(actor=self.actor)], ["team", "model", "alias", "version", "moved"]))

    def do_alias(self, o):
        v = self._version(o["version"])
        alias = aliases.alias_move(actor=self.actor, version=v, name=o["name"], reason=o["reason"], override=o["override"],
                                    suite=o["suite"])
        self.out(f"{alias.base}:{alias.name} -> {alias.version.name}")

    def do_rollback(self, o):
        teams = Team.objects.filter(pk__in=self.actor.team_ids, model_aliases__base=o["base"], model_aliases__name=o["alias"])
        if o["team"]:
            teams = teams.filter(slug=o["team"])
        teams = list(teams.distinct()[:2])
        if len(teams) != 1:
            raise CommandError(f"{o['base']} has no {o['alias']} alias in your teams" if not teams else "several teams: say --team")
        alias = aliases.alias_rollback(actor=self.actor, team=teams[0], base=o["base"], name=o["alias"], reason=o["reason"])
        self.out(f"{alias.base}:{alias.name} rolled back to {alias.version.name}")

    def do_history(self, o):
        moves = selectors.alias_history(actor=self.actor, base=o["base"], name=o["alias"])[:100]
        self.out(table([(m.at.strftime("%Y-%m-%d %H:%M:%S"), m.kind, m.from_version.name if m.from_version_id else "",
                         m.to_version.name, m.actor.username if m.actor_id else "system", m.reason) for m in moves],
                       ["at", "kind", "from", "to", "by", "reason"]))

    def do_export(self, o):
        v = self._version(o["version"])
        path = aliases.version_export(actor=self.actor, version=v, dest=o["dest"])
        self.out(f"exported {v.name} to {path}")
