"""Multi-turn environment domains: how fast a task goes through the real path, per domain.

For each domain of the families asked (default: ``filings``, ``tool_use``, ``repos``, ``cad``, ``bfcl``,
``bfcl_multi``, ``textgames`` and ``shell``; single-turn domains verify their reference completion through the cascade): draw
tasks over its levels, and for each one build the environment the trainer builds for an
episode (given the real sandbox, as the run driver gives it), drive it with the task's reference
transcript one call per turn (the multi-turn runner's loop, without a model) and verify the
episode: by the environment itself, or, for an environment that submits (a repository's final
diff), by the domain's cascade on the submission; then verify the same transcript through the
cascade (single-turn rollouts, SFT and the audit take that path). Reports per domain: tasks per
second for drawing, for the episode (with its verification) and for the cascade, the turns per
episode, whether every reference passed, and the sandbox-seconds per task (the wall time of
every sandbox job: a repository's ``run_tests`` turns and its hidden tests; 0 for environments
that run in the trainer's process; for a shell session, the time its opening and each of its jobs
held the sandbox). Shell domains (``shell-*``) are driven by each task's reference commands, one per
turn, and also by a do-nothing agent (submit at once) and by the task's wrong commands, whose passes
are counted; their rows add the reference episodes' wall seconds (median and longest). Package domains
(``swe-pkg-*``, family ``pkgs``) are driven by a reference agent that applies the task's answer with
``git apply`` from a heredoc, and by the agents of ``bench/_pkg_agents.py`` (do nothing, delete or
edit the tests, and the attacks of issue 46 point 3), whose passes are counted; their rows add the
reference episodes' wall seconds. ``--verify-workers N`` then verifies every package episode's
submission again with N worker processes (spawned, each with its own sandbox pool, as N verify
workers would) and reports episodes verified per second.

    .venv/bin/python bench/envs.py [--tasks 40] [--families filings,tool_use,repos,cad,bfcl,bfcl_multi,textgames,shell,pkgs] [--verify-workers 2]   # last line: JSON
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _pkg_agents as pkg_agents  # noqa: E402  (bench/ is not a package)


class TimedSession:
    """A shell session whose jobs' wall time (each command and the final reads) is added to ``total[0]``."""

    def __init__(self, session, total):
        self.session, self.total = session, total

    def __getattr__(self, name):
        return getattr(self.session, name)

    def _timed(self, method, *args):
        t0 = time.perf_counter()
        try:
            return method(*args)
        finally:
            self.total[0] += time.perf_counter() - t0

    def run(self, command):
        return self._timed(self.session.run, command)

    def files(self, *args):
        return self._timed(self.session.files, *args)

    def read(self, *args):
        return self._timed(self.session.read, *args)


def actions_of(spec, task, commands=None):
    """The reference's actions, one per turn: a shell task's reference commands (or ``commands``)
    and a submit; any other domain's reference transcript."""
    from trainer.environments import split_actions  # lazy: after the path is set

    if spec.family not in ("shell", "pkgs"):
        return split_actions(str(task.answer))
    if commands is None:
        commands = pkg_agents.reference(task) if spec.family == "pkgs" else task.meta["reference_commands"]
    return [json.dumps({"tool": "bash", "command": c}) for c in commands] + ['{"tool": "submit"}']


def run_episode(spec, task, actions, context, cascade, kept=None, agent="reference"):
    """(verdict, turns) of one episode driven by ``actions``: the environment's own verdict, or
    the cascade's on its submission (what the verify queue does with the episode); ``kept``
    gets (slug, task, submission, agent)."""
    env = spec.environment(task)
    if (bind := getattr(env, "bind", None)) is not None:
        bind(context)
    env.reset(task)
    result, turns = None, 0
    for action in actions:
        turns += 1
        result = env.step(action)
        if result.done:
            break
    verdict = result.outcome if result and result.done else None
    if result and result.done and verdict is None and hasattr(env, "submission"):
        submission = env.submission()
        verdict = cascade(submission, task)
        if kept is not None:
            kept.append((spec.slug, task, submission, agent))
    return verdict, turns


def shell_agents(spec, tasks, context, cascade, wall_s):
    """A shell domain's other agents (do-nothing: submit at once; wrong: the task's wrong
    commands), how many of their episodes pass, and the reference episodes' wall seconds."""
    from trainer.outcomes import Outcome  # lazy: after the path is set

    def passes(commands_of):
        return sum(bool((v := run_episode(spec, t, actions_of(spec, t, commands_of(t)), context, cascade)[0])
                        and v.outcome is Outcome.PASS) for t in tasks)

    ordered = sorted(wall_s)
    return {"nothing_passed": f"{passes(lambda t: [])}/{len(tasks)}",
            "wrong_passed": f"{passes(lambda t: t.meta['wrong_commands'])}/{len(tasks)}",
            "episode_wall_s_p50": round(ordered[len(ordered) // 2], 3), "episode_wall_s_max": round(ordered[-1], 3)}


def pkg_rows(spec, tasks, context, cascade, wall_s, sandbox_s, kept):
    """A package domain's other agents (``bench/_pkg_agents.py``): how many of each one's
    episodes pass, their sandbox-seconds per episode, and the reference episodes' wall seconds."""
    from trainer.families.pkgs.environment import starting_files, task_record  # lazy: after the path is set
    from trainer.outcomes import Outcome

    passed, infra, episodes, before = {}, 0, 0, sandbox_s[0]
    for task in tasks:
        record = task_record(str(task.meta["package"]), str(task.meta["task_id"]))
        for name, commands in pkg_agents.agents(task, record, starting_files(task)).items():
            verdict, _ = run_episode(spec, task, actions_of(spec, task, commands), context, cascade, kept, name)
            passed[name] = passed.get(name, 0) + bool(verdict and verdict.outcome is Outcome.PASS)
            infra += bool(verdict is None or verdict.outcome is Outcome.SANDBOX_ERROR)
            episodes += 1
    ordered = sorted(wall_s)
    row = {f"{name}_passed": f"{n}/{len(tasks)}" for name, n in passed.items()}
    row.update(agents_sandbox_error=infra, agents_sandbox_s_per_episode=round((sandbox_s[0] - before) / max(episodes, 1), 3),
               episode_wall_s_p50=round(ordered[len(ordered) // 2], 3), episode_wall_s_max=round(ordered[-1], 3))
    return row


_VERIFY = {}


def _verify_init():
    """A verify worker process: the catalogue loaded and the real sandbox, as a verify worker has."""
    from trainer.catalogue import all_domains
    from trainer.verifiers import VerifyContext
    from workers.sandbox import execute

    _VERIFY["context"], _VERIFY["domains"] = VerifyContext(execute=execute), all_domains()


def _verify_one(item):
    slug, task, submission, _ = item
    t0 = time.perf_counter()
    verdict = _VERIFY["domains"][slug].cascade(_VERIFY["context"])(submission, task)
    return slug, verdict.outcome.value, time.perf_counter() - t0


def _ready(_):
    return os.getpid()


def verify_with_workers(kept, workers):
    """The kept episodes' submissions verified again by ``workers`` spawned processes (the pool
    started and warm first): episodes per second, outcomes and mean seconds per verification, for
    the reference episodes alone (every one a full test run) and for all the agents' together."""
    import collections
    import multiprocessing

    out = {"workers": workers}
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_verify_init) as pool:
        pool.map(_ready, range(4 * workers), chunksize=1)
        for name, items in (("reference", [k for k in kept if k[3] == "reference"]), ("all_agents", kept)):
            t0 = time.perf_counter()
            results = pool.map(_verify_one, items, chunksize=1)
            seconds = time.perf_counter() - t0
            out[name] = {"episodes": len(items), "episodes_per_s": round(len(items) / seconds, 2),
                         "verify_s_mean": round(sum(r[2] for r in results) / max(len(results), 1), 3),
                         "outcomes": dict(collections.Counter(r[1] for r in results))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--families", default="filings,tool_use,repos,cad,bfcl,bfcl_multi,textgames,shell,pkgs")
    parser.add_argument("--verify-workers", type=int, default=0, help="verify the package episodes' submissions "
                        "again with this many worker processes")
    args = parser.parse_args()

    from trainer.catalogue import all_domains
    from trainer.families.references import reference_completion
    from trainer.outcomes import Outcome
    from trainer.tasks.filings import filing
    from trainer.verifiers import VerifyContext
    from workers.sandbox import execute, open_session

    sandbox_s = [0.0]

    def timed_execute(*args, **kwargs):
        verdict = execute(*args, **kwargs)
        sandbox_s[0] += verdict.wall_s
        return verdict

    def timed_open(*args, **kwargs):  # a shell session: its opening (files and setup) and each job
        t0 = time.perf_counter()
        session = open_session(*args, backend="bwrap", **kwargs)
        sandbox_s[0] += time.perf_counter() - t0
        return TimedSession(session, sandbox_s)

    context = VerifyContext(execute=timed_execute, open_session=timed_open)

    families = set(args.families.split(","))
    out, kept = {}, []
    for slug, spec in sorted(all_domains().items()):
        if spec.family not in families:
            continue
        rng = random.Random(0)
        cascade = spec.cascade(context)
        filing.cache_clear()  # each domain pays for building its own reports (domains share seeds here)
        t0 = time.perf_counter()
        tasks = [spec.source.sample(rng, i % spec.source.levels) for i in range(args.tasks)]
        draw_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        turns, passed = 0, 0
        sandbox_s[0] = 0.0
        if spec.environment is None:  # single-turn: the reference completion through the cascade
            passed = sum(cascade(reference_completion(spec, t), t).outcome is Outcome.PASS for t in tasks)
            seconds = time.perf_counter() - t0
            row = {"draw_tasks_per_s": round(len(tasks) / draw_s, 1), "cascade_tasks_per_s": round(len(tasks) / seconds, 1),
                   "references_passed": f"{passed}/{len(tasks)}", "sandbox_s_per_task": round(sandbox_s[0] / len(tasks), 3)}
            out[slug] = row
            print(f"{slug:26s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
            continue
        wall_s: list[float] = []
        for task in tasks:
            verdict, n = run_episode(spec, task, actions_of(spec, task), context, cascade, kept)
            wall_s.append(time.perf_counter() - t0 - sum(wall_s))
            turns += n
            passed += bool(verdict and verdict.outcome is Outcome.PASS)
        episode_s = time.perf_counter() - t0
        episode_sandbox_s = sandbox_s[0]
        t0 = time.perf_counter()
        cascade_ok = sum(cascade(str(t.answer), t).outcome is Outcome.PASS for t in tasks)
        cascade_s = time.perf_counter() - t0
        row = {"draw_tasks_per_s": round(len(tasks) / draw_s, 1), "episode_tasks_per_s": round(len(tasks) / episode_s, 1),
               "cascade_tasks_per_s": round(len(tasks) / cascade_s, 1), "turns_per_task": round(turns / len(tasks), 2),
               "references_passed": f"{passed}/{len(tasks)}", "cascade_passed": f"{cascade_ok}/{len(tasks)}",
               "sandbox_s_per_task": round(episode_sandbox_s / len(tasks), 3)}
        if spec.family == "shell":
            row.update(shell_agents(spec, tasks, context, cascade, wall_s))
        if spec.family == "pkgs":
            row.update(pkg_rows(spec, tasks, context, cascade, wall_s, sandbox_s, kept))
        out[slug] = row
        print(f"{slug:26s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    report = {"tasks": args.tasks, "domains": out}
    pkg_kept = [item for item in kept if item[0].startswith("swe-pkg-")]
    if args.verify_workers and pkg_kept:
        report["verify_workers"] = verify_with_workers(pkg_kept, args.verify_workers)
        print("verify workers " + json.dumps(report["verify_workers"]), flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
