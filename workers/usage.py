"""What a step consumed, per domain, from the trajectories it generated and trained on: the
figures the driver records with each step (``UsageRecord``; docs/orchestration.md, "Compute
accounting"). Pure: no database.

Per domain (``domain`` = its slug): generated tokens (model tokens of every completion generated,
refills and dropped groups too), trained tokens (model tokens of the completions the update
used), completions, verifications by outcome, sandbox seconds (the ``code_tests`` stages' time)
and judge calls and tokens (``judge`` stages; tokens as the endpoint reports them). Per step
(``domain`` = ""): wall seconds, the driver process's CPU seconds and GPU seconds (the run's GPUs
times the wall time it held them).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from controlplane.runs.usage import USAGE_FIELDS as FIELDS

SANDBOX_STAGES = frozenset({"code_tests", "repo_tests", "cad_mesh", "shell_state", "pkg_tests"})
JUDGE_STAGES = frozenset({"judge"})


def _blank() -> dict[str, Any]:
    return {**{f: 0 for f in FIELDS}, "outcomes": {}}


def step_usage(generated: Iterable[Any], trained: Iterable[Any], *, wall_s: float, cpu_s: float,
               gpus: int) -> dict[str, dict[str, Any]]:
    """Domain slug (and "" for the step itself) -> its figures.

    >>> from types import SimpleNamespace as NS
    >>> from trainer.outcomes import Outcome, Verification
    >>> code = Verification(Outcome.PASS, 1.0, {"stages": [{"type": "extract", "seconds": 0.001},
    ...                                                    {"type": "code_tests", "seconds": 0.25}]})
    >>> judged = Verification(Outcome.FAIL, 0.0, {"judge_tokens": 40, "stages": [{"type": "judge", "seconds": 0.5}]})
    >>> a = NS(task=NS(domain="code"), loss_mask=[1, 1, 1, 0], verification=code)
    >>> b = NS(task=NS(domain="qa"), loss_mask=[1, 1], verification=judged)
    >>> u = step_usage([a, b], [a], wall_s=2.0, cpu_s=3.5, gpus=2)
    >>> u["code"]["generated_tokens"], u["code"]["trained_tokens"], u["code"]["sandbox_s"], u["code"]["outcomes"]
    (3, 3, 0.25, {'pass': 1})
    >>> u["qa"]["judge_calls"], u["qa"]["judge_tokens"], u["qa"]["trained_tokens"]
    (1, 40, 0)
    >>> u[""]["wall_s"], u[""]["cpu_s"], u[""]["gpu_s"]
    (2.0, 3.5, 4.0)
    """
    out: dict[str, dict[str, Any]] = defaultdict(_blank)
    for t in generated:
        row = out[t.task.domain]
        row["generated_tokens"] += int(sum(t.loss_mask))
        row["completions"] += 1
        v = t.verification
        if v is None:
            continue
        row["outcomes"][v.outcome.value] = row["outcomes"].get(v.outcome.value, 0) + 1
        for stage in v.details.get("stages") or []:
            kind, seconds = stage.get("type"), stage.get("seconds")
            if kind in SANDBOX_STAGES and isinstance(seconds, (int, float)):
                row["sandbox_s"] += float(seconds)
            elif kind in JUDGE_STAGES:
                row["judge_calls"] += 1
        tokens = v.details.get("judge_tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
            row["judge_tokens"] += tokens
    for t in trained:
        out[t.task.domain]["trained_tokens"] += int(sum(t.loss_mask))
    step = out[""]
    step["wall_s"] = float(wall_s)
    step["cpu_s"] = float(cpu_s)
    step["gpu_s"] = float(wall_s) * max(int(gpus), 0)
    return dict(out)
