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
are counted; their rows add the reference episodes' wall seconds (median and longest).

    .venv/bin/python bench/envs.py [--tasks 40] [--families filings,tool_use,repos,cad,bfcl,bfcl_multi,textgames,shell]   # last line: JSON
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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

    if spec.family != "shell":
        return split_actions(str(task.answer))
    commands = task.meta["reference_commands"] if commands is None else commands
    return [json.dumps({"tool": "bash", "command": c}) for c in commands] + ['{"tool": "submit"}']


def run_episode(spec, task, actions, context, cascade):
    """(verdict, turns) of one episode driven by ``actions``: the environment's own verdict, or
    the cascade's on its submission (what the verify queue does with the episode)."""
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
        verdict = cascade(env.submission(), task)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--families", default="filings,tool_use,repos,cad,bfcl,bfcl_multi,textgames,shell")
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
    out = {}
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
            verdict, n = run_episode(spec, task, actions_of(spec, task), context, cascade)
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
        out[slug] = row
        print(f"{slug:26s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    print(json.dumps({"tasks": args.tasks, "domains": out}))


if __name__ == "__main__":
    main()
