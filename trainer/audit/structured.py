"""Probes of the structured answer kinds: tool transcripts, programs, CAD solids, calls, repositories,
shell tasks' final trees.

Each kind's probes are built from the task's reference (a transcript, a solution, a solid, the
expected calls, the repository's fix) and the hostile inputs that kind invites (trainer/audit/probes.py
holds the text probes, the shared :class:`~trainer.audit.probes.Probe` and the classes they fall in).
"""
from __future__ import annotations

import json
from typing import Any

from trainer.audit.code_probes import hostile_programs
from trainer.audit.probes import CLASSES, Probe
from trainer.tasks.base import Task
from trainer.verifiers.code import extract_code
from trainer.verifiers.code_harness import exported_names

# ---- tool-use transcripts -----------------------------------------------------------------------

def _calls(transcript: str) -> list[dict[str, Any]]:
    out = []
    for line in transcript.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            return []
        if isinstance(obj, dict):
            out.append(obj)
    return out


def tool_probes(task: Task, gold: str) -> list[Probe]:
    """Probes for a tool-call transcript: non-finite and constant values where the gold sets
    numbers, a bare submit, nothing, and the gold drowned in calls past the step budget."""
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES[cls], note))

    add("gold", gold, "the reference transcript")
    add("equivalent", "\n\n".join(gold.splitlines()) + "\n", "blank lines between calls")
    calls = _calls(gold)
    numeric_sets = [i for i, c in enumerate(calls) if c.get("tool") in ("set", "answer")
                    and isinstance(c.get("value"), (int, float)) and not isinstance(c.get("value"), bool)]
    if numeric_sets:
        def with_values(value_text: str) -> str:
            lines = []
            for i, c in enumerate(calls):
                if i in numeric_sets:
                    lines.append(json.dumps({k: v for k, v in c.items() if k != "value"})[:-1] + ', "value": %s}' % value_text)
                else:
                    lines.append(json.dumps(c))
            return "\n".join(lines)

        for text in ("NaN", "Infinity", "-Infinity", '"nan"', '"inf"', "1e999"):
            add("non_finite", with_values(text), f"every target set to {text}")
        add("constant", with_values("0"), "every target set to 0")
        bumped = [json.dumps({**c, "value": c["value"] + 1}) if i in numeric_sets else json.dumps(c) for i, c in enumerate(calls)]
        add("perturbed", "\n".join(bumped), "every target off by one")
        answers = [i for i in numeric_sets if calls[i].get("tool") == "answer"]
        if answers:  # the one final answer: hedged in one call, or a wrong one first and the gold after
            i = answers[-1]
            gold_value, wrong = calls[i]["value"], calls[i]["value"] + 1
            before = [json.dumps(c) for c in calls[:i]]
            for note, value in (("a list of a wrong value and the gold", [wrong, gold_value]),
                                ("the gold and a wrong value in one string", f"{gold_value} or {wrong}"),
                                ("a wrong value and the gold in one string", f"{wrong} or {gold_value}")):
                add("hedge", "\n".join(before + [json.dumps({"tool": "answer", "value": value})]), note)
            add("hedge", "\n".join(before + [json.dumps({"tool": "answer", "value": wrong}),
                                              json.dumps({"tool": "answer", "value": gold_value})]),
                "a wrong answer, then the gold")
    add("empty", "", "no calls")
    add("constant", '{"tool": "submit"}', "submit at once")
    add("long", "\n".join(['{"tool": "keys"}'] * 300 + [gold]), "300 calls before the gold")
    return probes


# ---- code -------------------------------------------------------------------------------------

def code_probes(task: Task, gold_completion: str | None, perturbed: str | None) -> list[Probe]:
    """Probes for a code task: the reference program and harmless rewrites of it, a broken one,
    empty and constant programs, and every hostile program of :mod:`trainer.audit.code_probes`."""
    answer = task.answer if isinstance(task.answer, dict) else {"tests": task.answer}
    prompt = answer.get("prompt") or ""
    entry = answer.get("entry_point")
    if not entry:
        tests = answer.get("tests")
        names = exported_names(tests if isinstance(tests, list) else [str(tests)], "", None) if tests else []
        entry = names[0] if names else "solution"
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str, expect: str | None = None) -> None:
        probes.append(Probe(cls, completion, task, expect or CLASSES.get(cls, CLASSES["code"]), note))

    if gold_completion:
        add("gold", gold_completion, "the reference solution")
        code = extract_code(gold_completion)
        add("equivalent", f"Here is my solution.\n\n```py\n# solution\n{code}\n\n```\nIt runs in linear time.", "prose, a comment, blank lines, ```py")
    if perturbed:
        add("perturbed", perturbed, "the reference solution with its result perturbed")
    header = prompt.split(f"def {entry}", 1)[0] if prompt else ""
    add("empty", "", "no code")
    add("empty", "```python\n```", "an empty code block")
    for value in ("None", "0", "''", "[]", "True"):
        add("constant", f"```python\n{header}def {entry}(*args, **kwargs):\n    return {value}\n```", f"returns {value}")
    for name, completion in hostile_programs(entry, prompt).items():
        add(f"code.{name}", completion, name, CLASSES["code"])
    return probes


# ---- CAD --------------------------------------------------------------------------------------

def cad_probes(task: Task) -> list[Probe]:
    """Probes for a modelling task (``cad-*``): the reference script and a reworded one; the
    reference with a dimension off; nothing, a unit cube, a sphere, the given part unchanged; and
    scripts that attack the run instead of modelling: a forged mesh line (empty, or a cube's), two
    mesh lines, an early exit, a patched exporter, a loop, a memory bomb."""
    from trainer.catalogue.cad import wrong_completion  # lazy: the catalogue imports the verifiers
    from trainer.tasks.cad import cad_task

    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES.get(cls, CLASSES["code"]), note))

    def script(code: str) -> str:
        return f"```python\nimport manifold3d as m3d\n{code}\n```"

    gold = task.answer
    code = extract_code(gold)
    add("gold", gold, "the reference script")
    add("equivalent", f"Here is the model.\n\n```py\n# the part\n\n{code}\n```\nUnits: mm.", "prose, a comment, ```py")
    add("perturbed", wrong_completion(task), "a dimension 10 % larger")
    add("empty", "", "no script")
    add("constant", script("result = m3d.Manifold.cube([1, 1, 1])"), "a unit cube")
    add("constant", script("result = m3d.Manifold.sphere(10, 64)"), "a sphere")
    given = cad_task(task.domain.removeprefix("cad-"), __import__("random").Random(task.meta["seed"]), task.level).given
    if given:
        add("constant", f"```python\n{given}```", "the given part unchanged")
    cube_line = ("import base64, numpy as np\n"
                 "v = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], '<f8')\n"
                 "t = np.array([[0,1,3],[0,3,2],[4,6,7],[4,7,5],[0,4,5],[0,5,1],[2,3,7],[2,7,6],[0,2,6],[0,6,4],[1,5,7],[1,7,3]], '<i4')\n"
                 "print('@@TEMPER-MESH', base64.b64encode(v.tobytes()).decode(), base64.b64encode(t.tobytes()).decode())\n")
    attacks = {
        "forged_empty_mesh": "import os\nprint('@@TEMPER-MESH  ', flush=True)\nos._exit(0)",
        "forged_cube_mesh": cube_line + "import os, sys\nsys.stdout.flush()\nos._exit(0)",
        "two_meshes": cube_line + code.split("import manifold3d as m3d", 1)[-1],
        "exit_early": "import sys\nsys.exit(0)",
        "patched_exporter": "m3d.Manifold.to_mesh = lambda self: None\nresult = m3d.Manifold.cube([1, 1, 1])",
        "endless": "while True:\n    pass",
        "memory_bomb": "x = bytearray(8 << 30)\nresult = m3d.Manifold.cube([1, 1, 1])",
    }
    for name, attack in attacks.items():
        add(f"code.{name}", script(attack), name)
    return probes


# ---- function calls ----------------------------------------------------------------------------

def call_probes(task: Task) -> list[Probe]:
    """Probes for a function-calling task (``bfcl-*``): the expected calls and the same calls
    fenced, spaced and (parallel) reordered; one value changed; no call, an empty list, a call of
    each offered function without arguments; the gold list and a wrong one in two blocks, and a
    wrong call added to the gold list; a float set to a non-finite value; the gold after 300
    lines. Where no function fits (irrelevance), the gold is a sentence without a call, and
    every call of an offered function, alone or beside that sentence, must fail."""
    from trainer.catalogue.bfcl import NO_CALL, perturbed_answer, reference_completion  # lazy: the catalogue imports the verifiers
    from trainer.verifiers.function_calls import reference_calls

    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES[cls], note))

    category = task.meta["category"]
    names = [f["name"] for f in task.meta["functions"]]
    gold = reference_completion(task)
    add("gold", gold, "the expected calls" if category != "irrelevance" else "no call")
    if category == "irrelevance":
        add("equivalent", "I cannot help with that using these tools.", "another sentence without a call")
        for name in names[:3]:
            add("perturbed", f"[{name}()]", f"a call of {name}")
            add("hedge", f"{NO_CALL}\nBut just in case: [{name}()]", "no call, then a call")
        add("long", "\n".join([f"[{names[0]}()]"] * 300) + "\n" + NO_CALL, "300 calls before the sentence")
        return probes
    add("equivalent", f"```python\n{gold.replace(', ', ',  ')}\n```", "fenced, spaced")
    add("empty", "", "nothing")
    add("constant", "[]", "an empty list")
    add("constant", NO_CALL, "no call")
    if category == "relevance":
        add("long", "\n".join([NO_CALL] * 300) + "\n" + gold, "300 sentences before the call")
        return probes
    calls = gold[1:-1]
    if category.startswith("parallel") and len(task.answer) > 1:
        add("equivalent", reference_calls(list(reversed(task.answer)), task.meta["functions"]), "the calls in reverse order")
    wrong = reference_calls(perturbed_answer(task.answer), task.meta["functions"])
    add("perturbed", wrong, "one value changed")
    for name in names[:3]:
        if f"[{name}()]" != gold:  # (a function without parameters: that call is the gold)
            add("constant", f"[{name}()]", f"{name} without arguments")
    add("hedge", f"```python\n{wrong}\n```\n```python\n{gold}\n```", "a wrong list, then the gold one")
    add("hedge", f"```python\n{gold}\n```\n```python\n{wrong}\n```", "the gold list, then a wrong one")
    add("hedge", f"[{calls}, {wrong[1:-1]}]", "the gold calls and wrong ones in one list")
    for param, values in next(iter(task.answer[0].values())).items():
        if values and isinstance(values[0], float):
            for text in ("1e999", "-1e999"):
                add("non_finite", gold.replace(f"{param}={values[0]!r}", f"{param}={text}", 1), f"{param}={text}")
            break
    add("long", "\n".join([wrong] * 300) + "\n" + gold, "300 wrong lists before the gold")
    return probes


# ---- repositories ------------------------------------------------------------------------------

def repo_probes(task: Task) -> list[Probe]:
    """Probes for a repository task (``swe-*``): the reference transcript, and its final tree as
    one ```diff block; the reference with a planted bug put back (or, for a refactor, without its
    last edit); nothing, a bare submit, constant bodies; a wrong diff and the gold one together,
    and the gold diff beside tool calls; the gold after 300 calls (past the step budget); every
    hostile program of the code audit appended to the module the hidden tests import from."""
    from trainer.families.swe.catalogue import wrong_transcript  # lazy: the catalogue imports the verifiers
    from trainer.families.swe.repo_kernels import KERNELS
    from trainer.verifiers.patches import tree_diff
    from trainer.families.swe.verifier import final_tree, spec_of, task_reference

    spec = spec_of(task)
    gold = task_reference(task)
    calls = [line for line in gold.splitlines() if line.strip()]
    edits = [c for c in calls if json.loads(c).get("tool") not in ("submit", "run_tests", "git_commit", "read")]
    tree, _ = final_tree(gold, task, spec)
    assert tree is not None, f"{task.id}: the reference transcript does not apply"
    gold_diff = tree_diff(spec.files, tree)
    probes: list[Probe] = []

    def add(cls: str, completion: str, note: str) -> None:
        probes.append(Probe(cls, completion, task, CLASSES.get(cls, CLASSES["code"]), note))

    def then_submit(lines: list[str]) -> str:
        return "\n".join(lines + ['{"tool": "submit"}'])

    add("gold", gold, "the reference transcript")
    add("equivalent", f"The change:\n\n```diff\n{gold_diff}```\n", "the reference's final tree as one diff block")
    target = KERNELS[spec.targets[0]]
    if spec.family == "refactor":
        add("perturbed", wrong_transcript(task), "the reference without its last edit")
    else:
        for path, text in sorted(tree.items()):
            if target.source in text:
                bug = target.bugged_source(0 if target.bugged_source(0) not in spec.files[path] else 1)
                add("perturbed", then_submit(edits + [json.dumps({"tool": "replace", "path": path, "old": target.source,
                                                                   "new": bug})]), "the reference with a planted bug put back")
                break
    add("empty", "", "no change")
    add("constant", '{"tool": "submit"}', "submit at once")
    name, (module, attribute) = next((n, e) for n, e in spec.exports.items() if e[1] in (target.name, *target.renames)
                                     and not n.endswith("__moved"))
    path = module.replace(".", "/") + ".py"
    for value in ("None", "0", "''", "[]"):
        add("constant", then_submit(edits + [json.dumps({"tool": "write", "path": path, "content": tree[path] +
                                                          f"\n\ndef {attribute}(*args, **kwargs):\n    return {value}\n"})]),
            f"{attribute} returns {value}")
    wrong_tree, _ = final_tree(wrong_transcript(task), task, spec)
    wrong_diff = tree_diff(spec.files, wrong_tree or spec.files)
    if wrong_diff:
        add("hedge", f"```diff\n{wrong_diff}```\n```diff\n{gold_diff}```", "a wrong diff, then the gold one")
        add("hedge", f"```diff\n{gold_diff}```\n```diff\n{wrong_diff}```", "the gold diff, then a wrong one")
    add("hedge", gold_diff + "\n" + '{"tool": "write", "path": "README.md", "content": "x"}', "the gold diff beside a tool call")
    add("long", then_submit(['{"tool": "git_status"}'] * 300 + edits), "300 calls before the gold edits")
    for attack, completion in hostile_programs(attribute).items():
        add(f"code.{attack}", then_submit(edits + [json.dumps({"tool": "write", "path": path, "content": tree[path] + "\n\n"
                                                                + extract_code(completion)})]), attack)
    # the shape of a refactor hidden from the checks: an encoding they do not read, an alias or a
    # copy reached by strings or kept inside a block
    add("code.encoding", tree_diff(spec.files, {**tree, path: "# coding: utf-7\n" + tree[path]}),
        "the gold's diff with a UTF-7 coding line")
    if spec.family == "refactor":
        first = spec.structure[0]
        if first["check"] == "absent":
            new = spec.structure[1]["name"]
            add("code.alias_by_string", then_submit([json.dumps({"tool": "write", "path": path, "content": spec.files[path]
                                                                 + f"\nglobals()[{new!r}] = {first['name']}\n"})]),
                "the old function kept, the new name set through globals()")
        else:
            old_path = spec.structure[1]["path"]
            indented = target.source.replace("\n", "\n    ")
            add("code.copy_in_block", then_submit(edits + [json.dumps({"tool": "write", "path": old_path, "content":
                                                                       tree[old_path] + f"\nif True:\n    {indented}\n"})]),
                "a copy of the moved function kept inside an if block")
    return probes


# ---- shell tasks' final trees -------------------------------------------------------------------

def shell_probes(task: Task) -> list[Probe]:
    """Probes for a shell task (``shell-*``; the completion is the final tree as a diff, then for a
    git task the repository as a bundle, the reference's unless said): the reference tree, and the
    same with the checked files' final newline dropped; the tree with a line added to each checked
    file, and with one file the reference changes as the task left it; nothing; every file
    deleted; the checked files written empty; another seed's reference tree (a guess of the right
    form); the reference and a wrong change to the same files together; the reference after two
    megabytes of filler. A git task adds the reference's tree with no repository, and one that asks
    for a commit the reference's tree with the repository as the task left it."""
    from trainer.families.shell.catalogue import submission, wrong_diff  # lazy: the catalogue imports the verifiers
    from trainer.families.shell.gitstate import MARK
    from trainer.families.shell.tasks import shell_task

    meta = task.meta
    family, seed, level = str(meta["family"]), int(meta["seed"]), int(meta["level"])
    spec = shell_task(family, seed, level)
    final = spec.final()
    probes: list[Probe] = []

    def add(cls: str, tree: dict[str, str] | str, note: str) -> None:
        completion = tree if isinstance(tree, str) else submission(spec, tree)
        probes.append(Probe(cls, completion, task, CLASSES[cls], note))

    add("gold", final, "the reference's final tree")
    add("equivalent", {**final, **{p: t.rstrip("\n") for p, t in spec.expected.items()}},
        "the reference with the checked files' final newline dropped")
    add("perturbed", wrong_diff(task), "a line added to each checked file")
    first = next(p for p in sorted(final) if spec.files.get(p) != final[p])  # the reference's first change
    add("perturbed", {p: t for p, t in final.items() if p != first} | ({first: spec.files[first]} if first in spec.files else {}),
        f"{first} as the task left it")
    add("empty", submission(spec, spec.files, spec.before), "nothing changed")
    add("constant", {}, "every file deleted")
    add("constant", {**spec.files, **{p: "" for p in spec.expected}}, "the checked files written empty")
    other = shell_task(family, seed + 1, level)
    add("constant", {**spec.files, **{p: t for p, t in other.final().items() if p not in spec.files}},
        "another seed's reference outputs")
    reference = submission(spec, final)
    add("hedge", reference.split(MARK)[0] + wrong_diff(task), "the reference and a wrong change, both")
    add("long", "+" * 2_000_001 + reference, "the reference after two megabytes of filler")
    if spec.git:
        add("perturbed", reference.split(MARK)[0], "the reference's tree, no repository")
    if spec.after != spec.before:  # a task that asks for a commit
        add("perturbed", submission(spec, final, spec.before), "the reference's tree, the repository as the task left it")
    return probes
