"""Function calling from the Berkeley Function Calling Leaderboard (``bfcl-*``): the data comes from
the installed ``bfcl-eval`` package; Temper's own AST checker agrees with BFCL's checker on every
usable entry's reference answer and on wrong and harmlessly changed answers of several kinds; the
one final answer rule (two lists, hedges), non-finite values and non-literals fail; the
relevance domain is balanced between calling and abstaining."""
from __future__ import annotations

import collections
import json
import random
import sys
import types

import pytest

from trainer.catalogue import all_domains
from trainer.catalogue.bfcl import CATEGORY_OF, DOMAINS, NO_CALL, perturbed_answer, reference_completion, rows
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.function_calls import function_calls, parse_calls, reference_calls

CALL_FILES = ["simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple", "live_parallel",
              "live_parallel_multiple"]


@pytest.fixture(scope="module")
def bfcl_checker():
    """BFCL's own ``ast_checker``. Its module imports the leaderboard's model table, which imports
    every model vendor's SDK; the table is stood in for by one that maps every model to a config
    without ``underscore_to_dot`` (the only field the checker reads)."""
    name = "bfcl_eval.constants.model_config"
    saved = sys.modules.get(name)
    stub = types.ModuleType(name)
    stub.MODEL_CONFIG_MAPPING = collections.defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    sys.modules[name] = stub
    try:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

        def check(entry, completion: str, file_category: str) -> bool:
            try:
                calls = [{n: p} for n, p in parse_calls(completion)]
            except ValueError:
                return False
            return ast_checker(entry["function"], calls, entry["ground_truth"], Language.PYTHON, file_category, "model")["valid"]
        yield check
    finally:
        if saved is not None:
            sys.modules[name] = saved
        else:
            sys.modules.pop(name, None)


def task_of(entry: dict, file_category: str) -> Task:
    return Task("bfcl", entry["id"], "", entry["ground_truth"], 0,
                {"functions": entry["function"], "category": CATEGORY_OF[file_category]})


def variants(entry: dict) -> dict[str, str]:
    """Changed answers: wrong ones and harmless ones (both checkers must say the same)."""
    answer, functions = entry["ground_truth"], entry["function"]
    gold = reference_calls(answer, functions)
    out = {"gold": gold, "perturbed": reference_calls(perturbed_answer(answer), functions),
           "renamed": reference_calls([{name + "_x": p} for call in answer for name, p in call.items()], functions),
           "extra_call": gold[:-1] + ", " + gold[1:-1].split("), ")[0].rstrip(")") + ")]",
           "unexpected_param": gold.replace(")", ", zz_param=1)", 1)}
    (name, params), = answer[0].items()
    declared = next(f for f in functions if f["name"] == name)["parameters"].get("properties", {})
    for param, values in params.items():
        first = values[0] if values else ""
        if param not in declared or first == "":
            continue
        shown = f"{param}={first!r}"
        if isinstance(first, str):
            out["upper_case"] = gold.replace(shown, f"{param}={first.upper()!r}", 1)
        if isinstance(first, float) and first.is_integer():
            out["int_for_float"] = gold.replace(shown, f"{param}={int(first)}", 1)
        if isinstance(first, int) and not isinstance(first, bool):
            out["bool_for_int"] = gold.replace(shown, f"{param}=True", 1)
        out["dropped_param"] = gold.replace(shown + ", ", "", 1).replace(", " + shown, "", 1).replace(shown, "", 1)
        break
    return out


def test_our_checker_agrees_with_bfcls_on_every_usable_entry(bfcl_checker):
    counts = collections.Counter()
    disagreements = []
    for file_category in CALL_FILES:
        for entry in rows(file_category):
            task = task_of(entry, file_category)
            for kind, completion in variants(entry).items():
                ours = function_calls(completion, task).outcome is Outcome.PASS
                theirs = bfcl_checker(entry, completion, file_category)
                counts[kind, ours] += 1
                if ours != theirs:
                    disagreements.append((entry["id"], kind, completion[:120], ours, theirs))
    assert disagreements == [], disagreements[:5]
    assert sum(n for (kind, ok), n in counts.items() if kind == "gold" and ok) >= 2_300  # every reference passes
    assert not any(ok for (kind, ok), n in counts.items() if kind in ("perturbed", "renamed", "extra_call", "unexpected_param"))
    assert counts["upper_case", True] > 100 and counts["int_for_float", True] > 10 and counts["bool_for_int", False] > 100


def test_correct_calls_pass_in_any_order_where_bfcl_pairs_greedily():
    entry = next(e for e in rows("parallel") if e["id"] == "parallel_178")
    task = task_of(entry, "parallel")
    reordered = reference_calls(list(reversed(entry["ground_truth"])), entry["function"])
    assert function_calls(reordered, task).outcome is Outcome.PASS


def test_one_list_finite_literals_and_keywords_only():
    entry = rows("simple_python")[0]
    task = task_of(entry, "simple_python")
    gold = reference_calls(entry["ground_truth"], entry["function"])
    wrong = reference_calls(perturbed_answer(entry["ground_truth"]), entry["function"])
    assert function_calls(f"Sure:\n```python\n{gold}\n```", task).outcome is Outcome.PASS
    for bad in (f"```python\n{wrong}\n```\n```python\n{gold}\n```", f"{gold}\n{gold}", f"[{gold[1:-1]}, {wrong[1:-1]}]",
                "calculate_triangle_area(10, 5)", "[calculate_triangle_area(base=10, height=5, **{'unit': 'x'})]",
                "[calculate_triangle_area(base=__import__('os').getpid(), height=5)]",
                "[calculate_triangle_area(base=1e999, height=5)]", "[calculate_triangle_area(base=10, base=10, height=5)]",
                "(" * 5000 + ")" * 5000, gold + " " * 30_000):
        verdict = function_calls(bad, task)
        assert verdict.outcome in (Outcome.FAIL, Outcome.PARSE_ERROR) and not verdict.is_infrastructure, bad[:80]


def test_irrelevance_fails_any_call_and_relevance_needs_one():
    entry = rows("irrelevance")[0]
    task = Task("bfcl-relevance", entry["id"], "", None, 0, {"functions": entry["function"], "category": "irrelevance"})
    name = entry["function"][0]["name"]
    assert function_calls(NO_CALL, task).outcome is Outcome.PASS
    for bad in (f"[{name}()]", f"{NO_CALL} Maybe: {name}(x=1)", f"```python\n[{name}(a=1)]\n```"):
        assert function_calls(bad, task).outcome is Outcome.FAIL, bad
    spec = all_domains()["bfcl-relevance"]
    drawn = [spec.source.sample(random.Random(seed)) for seed in range(400)]
    abstain = sum(t.meta["category"] == "irrelevance" for t in drawn) / len(drawn)
    assert 0.42 < abstain < 0.58  # a constant "no call" earns about half, like a coin
    for task in drawn[:60]:
        assert spec.verify(reference_completion(task), task).outcome is Outcome.PASS
        other = NO_CALL if task.meta["category"] != "irrelevance" else f"[{task.meta['functions'][0]['name']}()]"
        assert spec.verify(other, task).outcome is not Outcome.PASS


def test_the_domains_draw_their_categories_with_prompts_that_show_the_functions():
    specs = {slug: spec for slug, spec in all_domains().items() if spec.family == "bfcl"}
    assert sorted(specs) == sorted(DOMAINS)
    for slug, spec in specs.items():
        task = spec.source.sample(random.Random(3))
        assert task.domain == slug and "You can call these functions" in task.prompt
        assert json.loads(task.prompt.split("\n", 1)[1].split("\n\n")[0])[0]["name"] == task.meta["functions"][0]["name"]
        assert spec.verify(reference_completion(task), task).outcome is Outcome.PASS


def test_a_call_hidden_from_a_pattern_is_still_a_call_where_none_fits():
    entry = rows("irrelevance")[3]
    task = Task("bfcl-relevance", entry["id"], "", None, 0, {"functions": entry["function"], "category": "irrelevance"})
    name = entry["function"][0]["name"]
    for hidden in (f"[({name})()]", f"[{name}#\n()]", f"[{name}\\\n()]", f"Sure: {name}  (x=1)", f"({name})(x=1)"):
        assert function_calls(hidden, task).outcome is Outcome.FAIL, hidden
    assert function_calls(f"The function {name} does not fit: it needs other inputs.", task).outcome is Outcome.PASS


def test_relevance_needs_a_call_that_fits_the_docs_and_a_long_name_chain_is_no_crash():
    spec = all_domains()["bfcl-relevance"]
    needing = [t for t in (spec.source.sample(random.Random(s)) for s in range(300)) if t.meta["category"] == "relevance"]
    bare = [t for t in needing if (t.meta["functions"][0]["parameters"].get("required"))]
    assert bare and all(spec.verify(f"[{t.meta['functions'][0]['name']}()]", t).outcome is Outcome.FAIL for t in bare)
    assert all(spec.verify(reference_completion(t), t).outcome is Outcome.PASS for t in needing)
    task = task_of(rows("simple_python")[0], "simple_python")
    assert function_calls("[" + "a." * 1200 + "b()]", task).outcome is Outcome.FAIL
