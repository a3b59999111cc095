"""BFCL's multi-turn conversations (``bfcl-multi-*``): the reference calls pass through the
environment turn by turn, and BFCL's own multi-turn checker agrees on every drawn entry, on the
reference and on the reference without its last turn's calls; withheld and excluded functions are
refused; calls are literals dispatched by name, never evaluated; a turn that needed calls and
made none fails."""
from __future__ import annotations

import json
import random

from trainer.catalogue import all_domains
from trainer.catalogue.bfcl_multi import CATEGORIES, reference_transcript, wrong_transcript
from trainer.tasks.bfcl_data import entries, entry_of
from trainer.environments.bfcl_multi import UNBOUNDED, BfclMultiEnv, CallError, parse_turn_calls
from trainer.outcomes import Outcome
from trainer.tasks.base import Task

DOMAINS = {slug: spec for slug, spec in all_domains().items() if spec.family == "bfcl_multi"}


def _task(category: str, bfcl_id: str) -> Task:
    entry, truth = entry_of(category, bfcl_id)
    return Task("bfcl-multi-" + category.replace("_", "-"), bfcl_id, "...", reference_transcript(truth), 0,
                {"environment": "bfcl_multi", "category": category, "bfcl_id": bfcl_id})


def _play(task: Task, transcript: str):
    env = BfclMultiEnv()
    env.reset(task)
    result = None
    for line in transcript.splitlines():
        result = env.step(line)
        if result.done:
            return result.outcome
    return env.evaluate()


def _bfcl_verdict(category: str, bfcl_id: str, turns: list[list[str]]) -> bool:
    """BFCL's own multi-turn checker on the calls made in each turn (one step a turn)."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    entry, truth = entry_of(category, bfcl_id)
    decoded = [[calls] if calls else [] for calls in turns]
    return multi_turn_checker(decoded, truth, entry, f"multi_turn_{category}", f"temper-test-{random.random()}")["valid"]


def test_four_categories_and_the_unbounded_class_left_out():
    assert sorted(DOMAINS) == sorted("bfcl-multi-" + c.replace("_", "-") for c in CATEGORIES)
    for spec in DOMAINS.values():
        drawn = [spec.source.sample(random.Random(s)) for s in range(30)]
        assert not any(set(entry_of(t.meta["category"], t.id)[0]["involved_classes"]) & UNBOUNDED for t in drawn)


def test_the_reference_passes_and_bfcls_checker_agrees_with_every_verdict():
    checked = 0
    for category in CATEGORIES:
        ids = sorted(i for i, (e, _) in entries(category).items() if not set(e["involved_classes"]) & UNBOUNDED)
        for bfcl_id in ids[::8]:
            task = _task(category, bfcl_id)
            _, truth = entry_of(category, bfcl_id)
            good = _play(task, task.answer)
            assert good.outcome is Outcome.PASS, (bfcl_id, good.details)
            assert _bfcl_verdict(category, bfcl_id, truth) is True
            last = max(i for i, calls in enumerate(truth) if calls)
            bad = _play(task, wrong_transcript(task))
            assert bad.outcome is Outcome.FAIL, bfcl_id
            assert _bfcl_verdict(category, bfcl_id, [c if i != last else [] for i, c in enumerate(truth)]) is False
            checked += 1
    assert checked >= 70


def test_withheld_and_excluded_functions_are_refused_and_calls_are_never_code():
    category = "miss_func"
    bfcl_id = next(i for i, (e, _) in entries(category).items() if not set(e["involved_classes"]) & UNBOUNDED)
    entry, truth = entry_of(category, bfcl_id)
    task = _task(category, bfcl_id)
    env = BfclMultiEnv()
    env.reset(task)
    withheld = next(iter(entry["missed_function"].values()))[0]
    assert "no function" in env.step(f"[{withheld}()]").observation
    for excluded in entry.get("excluded_function") or []:
        assert "no function" in env.step(f"[{excluded}()]").observation
    for hostile in ("[__import__('os').system('true')]", "[ls(a=open('/etc/passwd').read())]", "[ls(a=10**100)]",
                    "[ls(" + "[" * 500 + "]" * 500 + ")]"):
        try:
            parse_turn_calls(hostile)
        except CallError:
            continue
        raise AssertionError(f"parsed: {hostile[:60]}")


def test_a_turn_that_needed_calls_and_made_none_fails():
    task = _task("base", "multi_turn_base_0")
    verdict = _play(task, json.dumps({"tool": "reply", "text": "I would rather not."}))
    assert verdict.outcome is Outcome.FAIL and "no call" in verdict.details["error"]


def test_a_file_system_shared_into_itself_ends_the_episode_and_guessing_a_missing_value_fails():
    """Directories copied and moved into one another share their contents (BFCL's simulator): a
    few hundred calls would make 2^40 paths for find and du to walk; the episode ends first. In a
    turn whose request lacks a value (miss_param), a call that guesses it fails the turn."""
    from trainer.environments.bfcl_multi import MAX_STATE_NODES, expanded_size

    category, bfcl_id = "base", "multi_turn_base_11"
    entry, _ = entry_of(category, bfcl_id)
    assert "cp" not in (entry.get("excluded_function") or [])
    env = BfclMultiEnv()
    env.reset(_task(category, bfcl_id))
    grow = "[" + ", ".join(["mkdir(dir_name='a')"] + ["cp(source='a',destination='b'), mkdir(dir_name='n'), mv(source='a',destination='n'), "
                                                      "mv(source='b',destination='n'), mv(source='n',destination='a')"] * 9) + "]"
    for _ in range(4):
        result = env.step(grow)
        if result.done:
            break
    assert result.done and result.outcome.outcome is Outcome.FAIL and "counted along every path" in result.outcome.details["error"]
    assert all(expanded_size(vars(i)) <= 2 * MAX_STATE_NODES for i in env.model.instances.values())
    category = "miss_param"
    bfcl_id = next(i for i, (e, t) in entries(category).items() if not set(e["involved_classes"]) & UNBOUNDED and [] in t)
    _, truth = entry_of(category, bfcl_id)
    gap = truth.index([])
    guessed = [c if i != gap else truth[gap + 1][:1] for i, c in enumerate(truth)]
    verdict = _play(_task(category, bfcl_id), reference_transcript(guessed))
    assert verdict.outcome is Outcome.FAIL and "ask instead" in verdict.details["error"]
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_irrelevance_checker

    decoded = [[calls] if calls else [] for calls in guessed]
    assert multi_turn_irrelevance_checker(decoded, truth)["valid"] is False  # BFCL's own rule for such turns agrees


def test_a_simulator_call_leaves_the_processs_decimal_context_as_it_was():
    """BFCL's MathAPI.square_root sets the thread's decimal precision; a call runs in a context of
    its own, so nothing a policy calls changes the trainer's decimal arithmetic."""
    import decimal

    from trainer.environments.bfcl_multi import Simulators

    before = decimal.getcontext().prec
    sims = Simulators({"involved_classes": ["MathAPI"], "initial_config": {}}, False)
    out = sims.run([("square_root", [2], {"precision": 3})], {"square_root"})
    assert "1.41" in out[0] and decimal.getcontext().prec == before
