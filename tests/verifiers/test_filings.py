"""Long annual reports read through tools (``filing-*``): the report's length follows the level,
the facts an answer needs are far apart, the notes change the answer (a discontinued segment, a
stock split, a repayment after the year end, charges inside SG&A), and only one finite number,
given once, within the field's tolerance, passes. An episode runs through the multi-turn runner
the trainer uses."""
from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

from trainer.catalogue import all_domains
from trainer.environments import make_environment
from trainer.outcomes import Outcome
from trainer.tasks.filings import LEGACY, filing, round_half_up

DOMAINS = {slug: spec for slug, spec in all_domains().items() if spec.family == "filings"}


def tasks(slug: str, n: int = 8, seed: int = 0):
    spec, rng = DOMAINS[slug], random.Random(seed)
    return [spec.source.sample(rng, i % spec.source.levels) for i in range(n)]


def answered(task, value) -> str:
    """The reference transcript with its final answer replaced by ``value``."""
    lines = task.answer.splitlines()[:-1]
    return "\n".join(lines + [json.dumps({"tool": "answer", "value": value})])


def verdict(task, completion: str):
    return DOMAINS[task.domain].verify(completion, task)


def test_the_family_has_four_questions_over_four_lengths():
    assert sorted(DOMAINS) == ["filing-adjusted-margin", "filing-debt-due", "filing-eps", "filing-segment-share"]
    lengths = [filing(11, level).tokens for level in range(4)]
    assert lengths == sorted(lengths) and lengths[0] < 6_000 and lengths[-1] > 40_000
    # The prompt is the table of contents and the question: short at every length.
    for level in range(4):
        task = DOMAINS["filing-eps"].source.sample(random.Random(level), level)
        assert len(task.prompt) < 2_500 and "note-6" in task.prompt


@pytest.mark.parametrize("slug", sorted(DOMAINS))
def test_reference_passes_and_one_off_fails_at_every_level(slug):
    for task in tasks(slug):
        assert verdict(task, task.answer).outcome is Outcome.PASS
        gold = task.meta["gold"]
        assert verdict(task, answered(task, gold + 0.01 if task.meta["abs_tol"] else gold + 1)).outcome is Outcome.FAIL


@pytest.mark.parametrize("slug", sorted(DOMAINS))
def test_hedges_non_finite_and_constants_earn_nothing(slug):
    for task in tasks(slug):
        gold = task.meta["gold"]
        wrong = gold + 1
        for value in ([wrong, gold], [gold], f"{gold} or {wrong}", f"{wrong} {gold}", "NaN", "inf", None, True, {"v": gold},
                      0, 1, -1):
            assert verdict(task, answered(task, value)).reward == 0.0, (task.meta["question"], value)
        two = answered(task, wrong) + "\n" + json.dumps({"tool": "answer", "value": gold})
        assert verdict(task, two).reward == 0.0  # the first answer ends the episode
        assert verdict(task, '{"tool": "submit"}').reward == 0.0  # no answer at all


def test_the_notes_change_the_answers():
    """An answer that misses the note a question hinges on fails."""
    for task in tasks("filing-segment-share", 8):
        doc = filing(task.meta["seed"], task.meta["level"])
        year, segment = _year_and_segment(task, doc)
        with_legacy = round_half_up(100 * Fraction(doc.segment_revenue[year][segment], sum(doc.segment_revenue[year].values())), 2)
        assert verdict(task, answered(task, with_legacy)).reward == 0.0  # divided by the segment table's total
    for task in tasks("filing-eps", 8):
        doc = filing(task.meta["seed"], task.meta["level"])
        year = int(task.prompt.split("per share for FY")[1][:4])
        pre_split = round_half_up(Fraction(doc.values[year]["net_income"], doc.diluted_shares[year]), 2)
        assert verdict(task, answered(task, pre_split)).reward == 0.0  # the split after the year end ignored
    for task in tasks("filing-adjusted-margin", 8):
        doc = filing(task.meta["seed"], task.meta["level"])
        year = int(task.prompt.split("margin for FY")[1][:4])
        plain = round_half_up(100 * Fraction(doc.values[year]["operating_income"], doc.values[year]["revenue"]), 2)
        assert verdict(task, answered(task, plain)).reward == 0.0  # the charges not added back
    repaid_counted = 0
    for task in tasks("filing-debt-due", 40):
        doc = filing(task.meta["seed"], task.meta["level"])
        through = int(task.prompt.split("through FY")[1][:4])
        naive = sum(t.principal for t in doc.tranches if t.due <= through)
        if naive != task.meta["gold"]:  # the repaid notes fall due in the window
            repaid_counted += 1
            assert verdict(task, answered(task, naive)).reward == 0.0
        assert task.meta["gold"] > 0  # some debt always falls due: 0 is never the answer
    assert repaid_counted >= 5


def _year_and_segment(task, doc):
    text = task.prompt.split("Question: ")[1]
    year = int(text.split("revenue in FY")[1][:4])
    segment = next(s for s in doc.segments if f"its {s} segment" in text)
    assert segment != LEGACY
    return year, segment


def test_an_episode_through_the_multi_turn_runner_reads_searches_and_answers():
    """The trainer's multi-turn runner with a scripted engine that replays the reference calls:
    the tool outputs come back as (loss-masked) observations and the answer ends the episode."""
    from trainer.episodes import multi_turn
    from trainer.rollout.base import Generation, SamplingParams
    from trainer.models.tiny import CHARS, char_tokenizer

    tok = char_tokenizer(CHARS + "{}")  # the demo's characters have no braces; a tool call needs them
    task = DOMAINS["filing-debt-due"].source.sample(random.Random(4), 1)
    calls = task.answer.splitlines()

    class Scripted:
        def __init__(self):
            self.turn = 0

        def generate(self, prompts, params):
            text = calls[min(self.turn, len(calls) - 1)]
            self.turn += 1
            ids = tok(text, add_special_tokens=False)["input_ids"]
            return [Generation(token_ids=ids, logprobs=[0.0] * len(ids), finished=True, text=text) for _ in prompts]

    spec = DOMAINS["filing-debt-due"]
    [traj] = multi_turn(Scripted(), tok, [(task, 1, 0)], SamplingParams(max_new_tokens=400), spec.environment,
                        max_turns=len(calls), max_episode_tokens=60_000, max_prompt_tokens=4_000)
    assert traj.verification.outcome is Outcome.PASS and traj.turns == len(calls)
    assert 0 in traj.loss_mask and 1 in traj.loss_mask  # tool outputs masked, the model's calls trained


def test_read_and_search_stay_small_and_say_what_is_wrong():
    task = DOMAINS["filing-eps"].source.sample(random.Random(9), 3)
    env = make_environment("filing")
    env.reset(task)
    page = env.step('{"tool": "read", "section": "risks", "start": 1, "lines": 500}').observation
    assert len(page) < 7_000 and "lines 1-" in page
    assert "unknown section" in env.step('{"tool": "read", "section": "nope"}').observation
    assert "at least 3 characters" in env.step('{"tool": "search", "query": "a"}').observation
    assert "split" in env.step('{"tool": "search", "query": "stock split"}').observation
    assert env.step('{"tool": "calc", "expression": "__import__(\'os\')"}').observation.startswith("error")


# -- what an attacker pass found (2026-12-04), now refused ---------------------------------------

@pytest.mark.parametrize("line", [
    '{"tool": "calc", "expression": "(-1)**0.5 // 1"}',  # a complex value between steps
    '{"tool": "calc", "expression": "(10**64)**64 * (10**64)**64"}',  # past int's digit limit
    '{"tool": "calc", "expression": "(((9**64)**64)**64)**64"}',  # a power tower (hours)
    '{"tool": "read", "section": "note-4", "start": 1e999}',  # int(inf)
    '{"tool": "read", "section": "note-4", "lines": -1e999}',
    '{"tool": "answer", "value": ' + "[" * 100_000 + "]" * 100_000 + "}",  # nested too deep for json
    '{"tool": "toc", "x": ' + "1" * 5_000 + "}",  # an integer literal past the digit limit
    "<tool_call>" * 20_000,  # unclosed tags (a lazy regex over them is quadratic)
])
def test_hostile_turns_are_errors_of_the_turn_not_crashes(line):
    task = DOMAINS["filing-eps"].source.sample(random.Random(1), 2)
    env = make_environment("filing")
    env.reset(task)
    result = env.step(line)  # nothing escapes into the episode runner
    assert not result.done and result.observation.startswith("error")
    verdict_ = DOMAINS["filing-eps"].verify(line, task)
    assert verdict_.reward == 0.0 and not verdict_.is_infrastructure


def test_a_midpoint_between_two_roundings_matches_neither():
    for slug in ("filing-eps", "filing-adjusted-margin", "filing-segment-share"):
        for task in tasks(slug, 12):
            gold = task.meta["gold"]
            for midpoint in (round(gold - 0.005, 3), round(gold + 0.005, 3)):
                assert verdict(task, answered(task, midpoint)).reward == 0.0, (slug, gold, midpoint)
            assert verdict(task, answered(task, round(gold + 0.004, 3))).outcome is Outcome.PASS


def test_eps_is_never_near_zero_and_the_repayment_mostly_matters():
    for task in tasks("filing-eps", 200, seed=5):
        assert abs(task.meta["gold"]) >= 0.05
    changed = 0
    for task in tasks("filing-debt-due", 200, seed=5):
        doc = filing(task.meta["seed"], task.meta["level"])
        through = int(task.prompt.split("through FY")[1][:4])
        changed += sum(t.principal for t in doc.tranches if t.due <= through) != task.meta["gold"]
    assert changed >= 120  # the window holds the repaid notes in about three tasks of four
