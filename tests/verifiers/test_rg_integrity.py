"""Reward integrity for every reasoning-gym domain: what a policy could game an upstream scorer with
fails here (issue 14, "inherited scorers").

Per domain, through the real cascade (``spec.verify``) and through the ``rg_score`` stage alone
(the guards must hold without the extract stage in front of them): the gold passes; wrong and gold
together, in both orders, fail; a prefix or subset of the gold earns nothing; non-finite numbers
earn nothing; and (slow) no constant answer scores above chance, the rate at which another task's
gold scores on a task. Known examples of each class are tested by name at the end.
"""
from __future__ import annotations

import math
import os
import random
import re
import zlib
from functools import lru_cache
from pathlib import Path

import pytest

from trainer.catalogue.reasoning_gym_domains import BALANCED
from trainer.tasks.reasoning_gym import get_dataset
from trainer.verifiers.rg_score import judge, score
from trainer.outcomes import Outcome
from trainer.catalogue import all_domains
from trainer.tasks.base import Task
from trainer.verifiers.expressions import expression_reason
from trainer.verifiers.rg_score import OVERRIDES

RG = {slug: spec for slug, spec in all_domains().items() if spec.family == "reasoning_gym"}
TASKS_PER_DOMAIN = 3
TOP_LEVEL = 3
HEDGES = ("{a} or {b}", "{a}, {b}", "{a}\n{b}", "either {a} or {b}", "{a}/{b}", "{a} and {b}")
CONSTANTS = ("", "0", "1", "-1", "Yes", "No", "True", "False", "None", "{}", "[]", "A", "1*2*3*4")
NONFINITE = ("nan", "NaN", "inf", "-inf", "Infinity", "1e999")


def tagged(text: str) -> str:
    return f"<answer>{text}</answer>"


def rng_for(*parts) -> random.Random:
    return random.Random(zlib.crc32(":".join(map(str, parts)).encode()))


@lru_cache(maxsize=None)
def tasks_for(slug: str) -> tuple[Task, ...]:
    """A few tasks per domain: level 0, the top tested level, and one between."""
    spec = RG[slug]
    top = min(spec.source.levels - 1, TOP_LEVEL)
    levels = [0, top, top // 2][:TASKS_PER_DOMAIN]
    return tuple(spec.source.sample(rng_for(slug, level, i), level) for i, level in enumerate(levels))


def stage(answer: str, task: Task):
    """The ``rg_score`` stage on an extracted answer (no extract stage in front)."""
    return score(answer.strip(), task)


def reward(verification) -> float:
    return 0.0 if verification.reward is None else verification.reward


def wrong_answers(slug: str, task: Task) -> list[str]:
    """Answers that fail alone: another task's gold, and the gold with a number (else a letter) changed."""
    spec = RG[slug]
    candidates = [str(t.answer) for t in tasks_for(slug) if str(t.answer).strip() != str(task.answer).strip()]
    gold = str(task.answer)
    m = re.search(r"\d+", gold)
    if m:
        candidates.append(gold[: m.start()] + str(int(m.group(0)) + 1) + gold[m.end():])
    else:
        i = next((k for k, ch in enumerate(gold) if ch.isalpha()), None)
        if i is not None:
            candidates.append(gold[:i] + ("q" if gold[i].lower() != "q" else "z") + gold[i + 1:])
    candidates += ["zzz", "0"]  # where every other gold is also right (open-ended answers)
    return [w for w in candidates if w.strip() and reward(spec.verify(tagged(w), task, isolation="inline")) < 1.0][:2]


def partial_answers(gold: str) -> list[str]:
    """A prefix or subset of the gold: half its items, all but the last, the first, a numeric
    truncation (a number without its unit, "10" for "10 days", is not partial)."""
    pieces = re.split(r"(\s*,\s*|\s*\n\s*|\s+)", gold.strip())
    items = pieces[0::2]
    unitless = re.sub(r"(?<=\d)[\sA-Za-z°%]+$", "", gold.strip())
    out = []
    if len(items) >= 2:
        out += ["".join(pieces[: 2 * (len(items) // 2) - 1]), "".join(pieces[: 2 * (len(items) - 1) - 1]), items[0]]
    if re.fullmatch(r"-?\d+\.\d+", gold.strip()):
        whole, frac = gold.strip().split(".")
        out += [c for c in (whole, f"{whole}.{frac[:1]}") if abs(float(c) - float(gold)) > 0.01 * abs(float(gold)) + 1e-12]
    return [p for p in dict.fromkeys(out) if p.strip(" .") and p.strip(" .") not in (gold.strip(" ."), unitless)]


@pytest.mark.parametrize("slug", sorted(RG))
def test_gold_passes_and_hedges_fail(slug):
    spec = RG[slug]
    for task in tasks_for(slug):
        gold = str(task.answer)
        assert spec.verify(tagged(gold), task).outcome is Outcome.PASS, (task.id, gold)
        assert stage(gold, task).outcome is Outcome.PASS, (task.id, gold)
        wrongs = wrong_answers(slug, task)
        assert wrongs, f"no wrong answer found for {task.id}"
        for w in wrongs:
            for a, b in ((w, gold), (gold, w)):
                for form in HEDGES:
                    text = form.format(a=a, b=b)
                    assert reward(spec.verify(tagged(text), task, isolation="inline")) == 0, (task.id, text)
                    assert reward(stage(text, task)) == 0, (task.id, text)
                two_tags = tagged(a) + " " + tagged(b)
                assert reward(spec.verify(two_tags, task, isolation="inline")) == 0, (task.id, two_tags)


@pytest.mark.parametrize("slug", sorted(RG))
def test_partial_and_nonfinite_answers_earn_nothing(slug):
    spec = RG[slug]
    for task in tasks_for(slug):
        gold = str(task.answer)
        probes = partial_answers(gold) + list(NONFINITE)
        m = re.search(r"-?\d+(?:\.\d+)?", gold)
        if m:
            probes += [gold[: m.start()] + v + gold[m.end():] for v in ("nan", "inf")]
        for text in probes:
            assert reward(spec.verify(tagged(text), task, isolation="inline")) == 0, (task.id, gold[:80], text)
            assert reward(stage(text, task)) == 0, (task.id, gold[:80], text)


def constant_rates(slug: str, n: int) -> tuple[float, float, dict[str, float]]:
    """(chance, tolerance, rate per constant) over ``n`` tasks drawn across levels; the constants
    are :data:`CONSTANTS` and the most common golds of a second sample (a label the generator
    favours; picked apart from the tasks they are scored on, which would favour them)."""
    spec = RG[slug]
    top = min(spec.source.levels - 1, TOP_LEVEL)
    rng = rng_for(slug, "constants")
    tasks = [spec.source.sample(rng, (i * (top + 1)) // n) for i in range(n)]
    shuffled = [reward(spec.verify(tagged(str(tasks[(i + j) % n].answer)), task, isolation="inline"))
                for i, task in enumerate(tasks) for j in (1, 2, 3)]
    chance = sum(shuffled) / len(shuffled)
    p = max(chance, 1 / n)
    tolerance = 3 * math.sqrt(p * (1 - p) / n) + 1 / n  # sampling noise, and one hit more
    others = [str(spec.source.sample(rng, (i * (top + 1)) // (n // 2)).answer) for i in range(n // 2)]  # picks the common golds
    modes = tuple(g for g in sorted(set(others), key=lambda g: (-others.count(g), g))[:3] if others.count(g) > 1)
    rates = {c: sum(reward(spec.verify(tagged(c), t, isolation="inline")) for t in tasks) / n for c in dict.fromkeys(CONSTANTS + modes)}
    return chance, tolerance, rates


OPEN_CONCLUSIONS: dict[str, str] = {}
"""Domains where a constant still beats chance, and why (docs/domains.md, known limits)."""
CONSTANT_MARGINS = {
    "rg-quantum_lock": (0.05, "any shortest button sequence passes and the puzzles are small, so a common sequence "
                              "solves about 5% of other puzzles, against 1-3% for another task's sequence"),
}
"""Domains where a constant may beat chance by a named margin, and why (docs/domains.md, known limits)."""


@pytest.mark.slow
@pytest.mark.parametrize("slug", [
    pytest.param(slug, marks=pytest.mark.xfail(strict=True, reason=OPEN_CONCLUSIONS[slug])) if slug in OPEN_CONCLUSIONS else slug
    for slug in sorted(RG)
])
def test_constant_answers_do_not_beat_chance(slug):
    n = 96 if slug.removeprefix("rg-") in BALANCED else 24
    chance, tolerance, rates = constant_rates(slug, n)
    margin = CONSTANT_MARGINS.get(slug, (0.0, ""))[0]
    over = {c: r for c, r in rates.items() if r > chance + tolerance + margin}
    assert not over, f"constants above chance {chance:.3f} (+{tolerance:.3f}): {over}"


# --- the overrides, one known example each -------------------------------------------------------

def first_task(slug: str, level: int = 0, pick=lambda task: True) -> Task:
    spec = RG[slug]
    rng = rng_for(slug, "example")
    for _ in range(200):
        task = spec.source.sample(rng, level)
        if pick(task):
            return task
    raise AssertionError(f"no task of {slug} matches")


def upstream(task: Task, answer: str) -> float:
    meta = task.meta
    return float(get_dataset(meta["rg_dataset"], meta["rg_level"]).score_answer(answer, meta["rg_entry"]))


def test_every_override_has_a_reason_and_is_documented():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "domains.md").read_text()
    section = docs[docs.index("## reasoning-gym: overrides of upstream scorers"):]
    for name, override in OVERRIDES.items():
        assert f"rg-{name}" in RG, name
        assert len(override.reason) > 20, name
        assert f"`{name}`" in section, f"{name} is not in docs/domains.md"
    for name in BALANCED:
        assert f"`{name}`" in section, f"{name} is not in docs/domains.md"
    for slug in [*OPEN_CONCLUSIONS, *CONSTANT_MARGINS]:
        assert f"`{slug.removeprefix('rg-')}`" in section[section.index("Known limits"):], slug


def test_coin_flip_prefix_of_the_gold_fails():
    task = first_task("rg-coin_flip", pick=lambda t: re.fullmatch(r"0\.\d{2,}", str(t.answer)) is not None)
    assert upstream(task, "0") == 1.0  # the weakness this guards against
    assert stage("0", task).outcome is Outcome.FAIL
    assert stage(str(task.answer), task).outcome is Outcome.PASS


def test_gsm_symbolic_reads_the_whole_answer():
    task = first_task("rg-gsm_symbolic")
    gold = str(task.answer)
    assert upstream(task, f"{gold} or {int(gold) + 1}") == 1.0
    assert reward(stage(f"{gold} or {int(gold) + 1}", task)) == 0
    assert reward(stage(f"{gold} {int(gold) + 1}", task)) == 0
    assert stage(f"{int(gold):,}", task).outcome is Outcome.PASS


def test_rush_hour_needs_legal_moves_that_end_at_the_exit():
    task = first_task("rg-rush_hour")
    moves = str(task.answer).split()
    last = moves[-1]
    overshoot = " ".join(moves[:-1] + [f"{last[0]}{last[1]}{int(last[2:]) + 3}"])
    assert upstream(task, overshoot) == 1.0  # upstream moves the car as far as it goes
    assert stage(overshoot, task).outcome is Outcome.FAIL
    assert stage(" ".join(moves + ["B+1"]), task).outcome is Outcome.FAIL  # a move after the exit
    assert stage(" ".join(moves) + " or A-1", task).outcome is Outcome.FAIL


def test_sokoban_answer_is_only_moves():
    task = first_task("rg-sokoban")
    gold = str(task.answer)
    assert stage(gold, task).outcome is Outcome.PASS
    assert stage(f"{gold} or LRUD", task).outcome is Outcome.FAIL
    assert stage(gold + gold[-1], task).outcome is Outcome.FAIL  # a move after the solution


def test_puzzle24_uses_the_tasks_numbers():
    task = first_task("rg-puzzle24", pick=lambda t: sorted(t.meta["rg_entry"]["metadata"]["numbers"]) != [1, 2, 3, 4])
    assert upstream(task, "1*2*3*4") == 1.0  # upstream only counts four numbers in range
    assert stage("1*2*3*4", task).outcome is Outcome.FAIL
    assert stage(str(task.answer), task).outcome is Outcome.PASS


def test_game_of_life_halting_is_exact():
    task = first_task("rg-game_of_life_halting")
    other = "False" if str(task.answer) == "True" else "True"
    assert upstream(task, other) == 1.0
    assert stage(other, task).outcome is Outcome.FAIL


def test_answers_are_never_evaluated_as_code():
    marker = "TEMPER_RG_EVAL_PROBE"
    os.environ.pop(marker, None)
    payload = f"__import__('os').environ.setdefault('{marker}', '1')"
    for slug in ("rg-n_queens", "rg-binary_matrix", "rg-spiral_matrix", "rg-string_insertion",
                 "rg-simple_integration", "rg-intermediate_integration", "rg-polynomial_multiplication",
                 "rg-countdown", "rg-puzzle24"):
        task = first_task(slug)
        assert stage(payload, task).outcome is not Outcome.PASS, slug
        assert marker not in os.environ, f"{slug} evaluated the answer"


def test_expression_guard():
    assert expression_reason("x**3/3 + c", "x**3/3 + C") is None
    assert expression_reason("x**2 if x else 0", "x**2") is not None
    assert expression_reason("(lambda: 0)()", "x") is not None
    assert expression_reason("2**99999", "24", names=False) is not None


def test_label_balance_brings_constants_to_chance():
    """A balanced generator's most common answer is drawn about as often as its rarest."""
    for name in sorted(BALANCED):
        spec = RG[f"rg-{name}"]
        rng = rng_for(name, "balance")
        answers = [str(spec.source.sample(rng, 0).answer).strip().casefold() for _ in range(80)]
        counts = {a: answers.count(a) for a in set(answers)}
        top = max(counts.values()) / len(answers)
        chance = sum((c / len(answers)) ** 2 for c in counts.values())
        assert top <= chance + 3 * math.sqrt(chance * (1 - chance) / len(answers)) + 1 / len(answers), (name, top, chance)


LEVEL_BALANCE_TASKS = 300


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BALANCED))
def test_label_balance_holds_at_each_level(name):
    """At level 0 and the top tested level alone (pooled levels hide a level's favourite answer:
    count_bits' 11 was 13.8% of level-3 tasks against 7% chance), the label a first sample
    favours is no more common in a second sample than another task's label is, beyond sampling
    noise (3 sigma and one item). The favourite comes from samples, not the reference draws: an
    answer the reference draws measure too rare is the one sampling favours."""
    spec = RG[f"rg-{name}"]
    balance = BALANCED[name]
    for level in sorted({0, min(spec.source.levels - 1, TOP_LEVEL)}):
        rng = rng_for(name, level, "level balance")
        labels = [balance.label(t.meta["rg_entry"], t.answer)
                  for t in (spec.source.sample(rng, level) for _ in range(LEVEL_BALANCE_TASKS + LEVEL_BALANCE_TASKS // 2))]
        picked, scored = labels[LEVEL_BALANCE_TASKS:], labels[:LEVEL_BALANCE_TASKS]
        favourite = max(sorted(set(picked)), key=picked.count)
        n = len(scored)
        chance = sum((scored.count(a) / n) ** 2 for a in set(scored))
        rate = scored.count(favourite) / n
        margin = 3 * math.sqrt(max(chance * (1 - chance), 1 / n) / n) + 1 / n  # sampling noise, and one more
        assert rate <= chance + margin, (name, level, favourite[:60], rate, chance)


def test_open_ended_domains_mark_the_gold_as_an_example():
    for name, override in OVERRIDES.items():
        task = first_task(f"rg-{name}")
        assert task.meta.get("answer_is_example", False) is override.open_ended, name


def test_quantum_lock_pays_only_a_shortest_sequence():
    """A longer sequence that reaches the target earned upstream's 0.5, and so did a wrong guess
    followed by the gold when the two reached it together (the audit's ``w -> g`` hedge)."""
    import itertools

    from reasoning_gym.graphs.quantum_lock import QuantumLockDataset

    checked = 0
    for i in range(40):
        task = RG["rg-quantum_lock"].source.sample(rng_for("quantum_lock", "longer", i), 0)
        meta, gold = task.meta["rg_entry"]["metadata"], re.findall(r"[A-C]", str(task.answer))
        simulate = QuantumLockDataset.simulate_sequence
        longer = next((p for p in itertools.product("ABC", repeat=len(gold) + 1)
                       if simulate(None, meta, list(p)) == meta["target_value"]
                       and all(simulate(None, meta, list(p[:k])) != meta["target_value"] for k in range(1, len(p)))), None)
        if longer is None:
            continue
        assert stage(" → ".join(longer), task).outcome is Outcome.FAIL, (task.id, longer)
        assert stage(" → ".join(gold), task).outcome is Outcome.PASS, task.id
        checked += 1
    assert checked >= 3


def test_judge_passes_the_reference_it_chose():
    for slug in ("rg-rush_hour", "rg-boxnet", "rg-graph_color", "rg-propositional_logic"):
        task = first_task(slug)
        meta = task.meta
        assert judge(str(task.answer), meta["rg_entry"], meta["rg_dataset"], meta["rg_level"], str(task.answer)).outcome is Outcome.PASS


@pytest.mark.parametrize("slug", ["rg-number_sorting", "rg-number_format", "rg-polynomial_equations"])
def test_a_wrong_last_digit_fails_where_the_gold_is_exact(slug):
    task = first_task(slug, pick=lambda t: re.search(r"\d\.\d*[1-8]\b", str(t.answer)) is not None)
    gold = str(task.answer)
    m = list(re.finditer(r"\d\.\d*([1-8])\b", gold))[-1]
    wrong = gold[: m.end() - 1] + str(int(m.group(1)) + 1) + gold[m.end():]
    assert stage(gold, task).outcome is Outcome.PASS
    assert upstream(task, wrong) >= 0.99  # within the upstream tolerance
    assert reward(stage(wrong, task)) == 0, wrong


@pytest.mark.parametrize("slug, junk", [
    ("rg-letter_jumble", lambda g: g + " zzz qqq"),
    ("rg-letter_jumble", lambda g: g + " because it is"),
    ("rg-kakurasu", lambda g: "\n".join(line + " 9" for line in g.splitlines())),
    ("rg-kakurasu", lambda g: g + "\ndone"),
    ("rg-survo", lambda g: "Grid:\n" + g),
    ("rg-survo", lambda g: g + " :)"),
])
def test_nothing_may_follow_or_surround_the_gold_where_upstream_stops_reading(slug, junk):
    for level in range(RG[slug].source.levels):
        task = first_task(slug, level=level)
        gold = str(task.answer)
        assert stage(gold, task).outcome is Outcome.PASS
        assert reward(stage(junk(gold), task)) == 0, junk(gold)


def test_figlet_font_needs_the_whole_word():
    task = first_task("rg-figlet_font", level=4, pick=lambda t: len(str(t.answer)) >= 10)
    gold = str(task.answer)
    wrong = gold + "S"  # every letter of the gold in place, and one more
    assert upstream(task, wrong) == 1.0  # ten letters in place are worth 1 upstream
    assert stage(wrong, task).outcome is Outcome.FAIL
    assert stage(gold.lower(), task).outcome is Outcome.PASS
