"""Reference (correct) and deliberately wrong completions for any catalogue task.

Used by the all-domains test, the throughput bench, and as SFT targets: a reference completion is
what a perfect model would write, in the format the domain's cascade expects.
"""
from __future__ import annotations

import json

from trainer.catalogue import DomainSpec
from trainer.catalogue.bfcl import reference_completion as bfcl_reference
from trainer.catalogue.bfcl import wrong_completion as bfcl_wrong
from trainer.catalogue.bfcl_multi import wrong_transcript as bfcl_multi_wrong
from trainer.catalogue.cad import wrong_completion as cad_wrong
from trainer.catalogue.documents import reference_completion as document_reference
from trainer.catalogue.humaneval import broken_completion
from trainer.catalogue.humaneval import reference_completion as humaneval_reference
from trainer.families.pkgs.catalogue import wrong_diff as pkg_wrong
from trainer.families.shell.catalogue import wrong_diff as shell_wrong
from trainer.families.swe.catalogue import wrong_transcript
from trainer.tasks.base import Task


def reference_completion(spec: DomainSpec, task: Task) -> str:
    """A completion the domain's verifier should pass."""
    if spec.family == "reasoning_gym":
        return f"<answer>{task.answer}</answer>"
    if spec.family == "humaneval":
        return humaneval_reference(task)
    if spec.family == "math":
        return f"The answer is $\\boxed{{{task.answer}}}$."
    if spec.family == "documents":
        return document_reference(task)
    if spec.family == "tool_use":
        return str(task.answer)
    if spec.family == "bfcl":
        return bfcl_reference(task)
    return str(task.answer)


def wrong_completion(spec: DomainSpec, task: Task) -> str:
    """A well-formed completion the domain's verifier should not pass."""
    if spec.family == "reasoning_gym":
        return "<answer>zzz wrong</answer>"
    if spec.family == "humaneval":
        return broken_completion(task)
    if spec.family == "math":
        return f"The answer is $\\boxed{{{task.meta['wrong_answer']}}}$."
    if spec.family == "documents":
        if isinstance(task.answer, dict):
            wrong = {k: (v + 1000 if isinstance(v, (int, float)) else v) for k, v in task.answer.items()}
            wrong["revenue"] = -1
            return f"<answer>{json.dumps(wrong)}</answer>"
        return f"<answer>{float(task.answer) + 1000}</answer>"
    if spec.family == "tool_use":
        return '{"tool": "submit"}'
    if spec.family == "repos":
        return wrong_transcript(task)
    if spec.family == "shell":
        return shell_wrong(task)
    if spec.family == "pkgs":
        return pkg_wrong(task)
    if spec.family == "bfcl":
        return bfcl_wrong(task)
    if spec.family == "cad":
        return cad_wrong(task)
    if spec.family == "bfcl_multi":
        return bfcl_multi_wrong(task)
    if spec.family == "textgames":  # the first half of the game's gold commands: the task is not done
        lines = str(task.answer).splitlines()
        return "\n".join(lines[:max(len(lines) // 2, 1)])
    if spec.family == "filings":  # the reference transcript with its answer off by one
        lines = str(task.answer).splitlines()
        return "\n".join(lines[:-1] + [json.dumps({"tool": "answer", "value": task.meta["gold"] + 1})])
    answer = str(task.answer)
    return answer + "9" if answer else "zzz wrong"
