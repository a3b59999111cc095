"""Every reasoning-gym generator as its own domain, ``rg-<name>``, verified by its own
``score_answer`` behind Temper's guards and overrides (:func:`judge`,
:mod:`trainer.verifiers.rg_score`).

Levels come from the generator's curriculum: level ``k`` sets every curriculum attribute to
``min(k, its last level)`` (reasoning-gym's ``set_global_level``), so a domain has as many
levels as its longest attribute; generators without a curriculum have one level (defaults).
Some curricula define top levels whose configuration the generator itself rejects; a domain's
levels stop before the first such level. A task is item ``idx`` of dataset shard ``shard`` at its
level (a fixed seed per level and shard; some generators build items in ``__init__``, so shards
stay small), both drawn from the caller's rng: the same rng state always gives the same task.
Generators whose answers are imbalanced (:data:`BALANCED`) are sampled label-balanced, so that a
constant answer scores no better than chance; items no answer could be wrong for are not drawn
(:func:`unfit_reason`).
"""
from __future__ import annotations

import dataclasses
import functools
import random
import re
from collections import Counter
from typing import Any

from trainer.outcomes import Outcome
from trainer.catalogue import DomainSpec, register
from trainer.catalogue.rg_solvers import reference_candidates
from trainer.tasks.base import Task
from trainer.tasks.reasoning_gym import DATASET_SIZE, SEED, curriculum_levels, generate, get_dataset, level_count
from trainer.verifiers.rg_score import judge, override_for

FAMILY = "reasoning_gym"
SHARDS = 500
GENERATION_TRIES = 5
ANSWER_INSTRUCTION = "\n\nGive your final answer inside <answer></answer> tags."

KIND_BY_PACKAGE = {
    "arithmetic": "math",
    "algebra": "math",
    "geometry": "math",
    "probability": "math",
    "code": "code",
}




@dataclasses.dataclass(frozen=True)
class Balance:
    """Why a generator's answers are sampled label-balanced, and how its answer shares are measured."""

    reason: str
    """Which answers the generator favours (measured at levels 0 and top, 400 items each)."""
    draws: int = 1000
    """Items drawn once per level (fixed seeds) to measure each answer's share."""
    by: str = "answer"
    """What is balanced: ``"answer"`` (the reference answer), ``"numbers"`` (the puzzle's
    numbers in any order, where one puzzle has many right expressions) or ``"truth table"`` (the
    conclusion's truth table over its own variables, where logically equivalent conclusions all
    pass)."""

    def label(self, entry: dict[str, Any], answer: Any) -> str:
        """The label an item counts under."""
        if self.by == "numbers":
            return " ".join(str(n) for n in sorted(entry["metadata"]["numbers"]))
        if self.by == "truth table":
            from reasoning_gym.logic.propositional_logic import Expression

            text = entry["metadata"]["example_answer"]
            expr, names = Expression.from_string(text), sorted(set(re.findall(r"[A-Z]", text)))
            rows = (dict(zip(names, (bool(i >> j & 1) for j in range(len(names))))) for i in range(1 << len(names)))
            return " ".join(names) + ":" + "".join("1" if expr.evaluate(row) else "0" for row in rows)
        return answer_label(answer)


FEW_ANSWER_DRAWS = 8000
"""Reference draws for generators with few answers (4 shards x 2,000 items), enough that an answer
right for 2% of tasks is not measured under the cap."""

# Label balance: generators whose answers come from a small set, or where a few answers are much
# more common than the rest, so that a constant answer beats chance (the rate at which another
# task's gold is right; measured with bench/rg_scorers.py). sample() keeps an item with
# probability (rarest share / its answer's share), so every answer is about equally likely.
BALANCED: dict[str, Balance] = {
    "acre": Balance("on / off / undetermined: 39% / 32% / 29%", draws=400),
    "basic_arithmetic": Balance("0, -1 and 1 are 22% of level-0 answers (chance 3%)", draws=FEW_ANSWER_DRAWS),
    "binary_alternation": Balance("-1 (impossible) is 19-23% of answers", draws=FEW_ANSWER_DRAWS),
    "chain_sum": Balance("small sums repeat at level 0: 0 alone is 4.5% (chance 1.5%)", draws=FEW_ANSWER_DRAWS),
    "circuit_logic": Balance("0 / 1: 63% / 37%", draws=FEW_ANSWER_DRAWS),
    "coin_flip": Balance("five answers at level 0, 0.125 alone 34%; 0.375 was right for 20% of tasks (chance 12%)", draws=FEW_ANSWER_DRAWS),
    "composite": Balance("its parts' small answers repeat: 1 was right for 3% of tasks (chance 0)"),
    "count_bits": Balance("the middle counts dominate: 23% for one of nine answers at level 0", draws=FEW_ANSWER_DRAWS),
    "calendar_arithmetic": Balance("yes / no questions and weekdays: 'no' was the answer to 17-25% of level-1 and 2 tasks "
                                   "(chance 6-14%)", draws=FEW_ANSWER_DRAWS),
    "game_of_life": Balance("the all-dead board is 9% of level-0 answers (another task's board is right for 1%)", draws=400),
    "family_relationships": Balance("son is 21-33% of answers (chance 12-22%), husband and wife the next", draws=FEW_ANSWER_DRAWS),
    "gcd": Balance("1 is 58% of top-level answers, 1 and 2 are 54% at level 0", draws=FEW_ANSWER_DRAWS),
    "graph_color": Balance("the same small graphs (and so the same colouring) recur: one colouring was "
                           "right for 17% of tasks against 4% for another task's colouring"),
    "jugs": Balance("the same puzzles recur at level 0 (one move list is 10% of answers); '[\"no solution\"]' is 15% "
                    "at level 1", draws=400),
    "knight_swap": Balance("'No' (impossible) is 15-20% of answers; every possible puzzle has its own move list",
                           draws=100),
    "largest_island": Balance("10 is 49% of level-0 answers", draws=FEW_ANSWER_DRAWS),
    "leg_counting": Balance("small totals repeat and 0 legs is 7% of answers from level 2 (chance 2%)", draws=FEW_ANSWER_DRAWS),
    "letter_counting": Balance("1 is 32-46% of answers", draws=FEW_ANSWER_DRAWS),
    "list_functions": Balance("[0] and [1] are 11% of answers (chance 3%)"),
    "manipulate_matrix": Balance("an all-zero matrix or a 1x1 '0' is 2% of answers (chance 0.3%)"),
    "maze": Balance("a few path lengths dominate at level 0 (19% for one of six)", draws=4000),
    "number_sequence": Balance("small next terms repeat: 4 was the answer to 25% of tasks (chance 6%)"),
    "polynomial_equations": Balance("the root 0.0 alone is 46% of level-0 answers, 17% at the top", draws=200),
    "products": Balance("0 is 2% of answers (chance 0.2%)", draws=FEW_ANSWER_DRAWS),
    "propositional_logic": Balance("a few conclusions recur up to equivalence ((P ∨ Q) passed 10% of tasks, "
                                   "chance 2%)", by="truth table", draws=FEW_ANSWER_DRAWS),
    "puzzle24": Balance("the same four numbers recur (balanced by the numbers, not the expression): 1*2*3*4 was "
                        "right for 8-10% of tasks (chance 3%)", by="numbers"),
    "quantum_lock": Balance("A → A → A → A alone is 9% of level-0 answers", draws=FEW_ANSWER_DRAWS),
    "rearc": Balance("single-cell grids recur from level 5: the digit 0 alone was right for 7% of level-5 tasks (chance 2%)"),
    "rectangle_count": Balance("small counts repeat: 4 was the answer to 25% of tasks (chance 6%)", draws=4000),
    "rotten_oranges": Balance("-1 (some orange never rots) is about a third of answers", draws=FEW_ANSWER_DRAWS),
    "self_reference": Balance("2 is 32-42% of answers from level 2 (chance 24-30%)", draws=FEW_ANSWER_DRAWS),
    "sentence_reordering": Balance("the corpus is small, so sentences recur: one was the answer to 17% of tasks"),
    "shortest_path": Balance("'infeasible' is 45% of level-0 answers and 69% at the top; other answers are paths"),
    "syllogism": Balance("Yes / No: 91% / 9% at level 0, 71% / 29% at the top", draws=FEW_ANSWER_DRAWS),
    "tsumego": Balance("a few points recur on the small boards: E3 was the answer to 12% of tasks (chance 3%)", draws=FEW_ANSWER_DRAWS),
    "time_intervals": Balance("0 days, 00:00, 1 days and 00:01 are a third of level-0 answers"),
}
UNFIT_TRIES = 256
"""Draws at most for one item when items are unfit (see :func:`unfit_reason`)."""
BALANCE_TRIES = 256
"""Draws at most per sample of a balanced generator (then the last draw is kept)."""
BALANCE_MIN_COUNT = 10
"""Items an answer needs among the reference draws before its share is thinned to the others'."""
BALANCE_MIN_SHARE = 0.01
"""The lowest cap where some answers repeat: rarer answers are not thinned, so that a task takes a
few draws (more reference draws make the shares precise, not the cap lower)."""



def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)



@dataclasses.dataclass
class ReasoningGymSource:
    """Task source for one reasoning-gym generator."""

    slug: str
    """Domain slug, ``rg-<name>``."""
    name: str
    """reasoning-gym dataset name."""
    levels: int
    """Number of difficulty levels."""

    def _reference(self, entry: dict[str, Any], level: int) -> str | None:
        """The first reference candidate Temper's own verdict passes (None if none does)."""
        for candidate in reference_candidates(self.name, entry):
            if judge(candidate, entry, self.name, level, candidate).outcome is Outcome.PASS:
                return candidate
        return None

    def _draw(self, rng: random.Random, level: int) -> tuple[int, int, int, dict[str, Any], str]:
        """``(level, shard, idx, entry, reference)`` of one item drawn from ``rng``."""
        while True:
            # Some generators fail on some seeds at their hardest settings, or emit an entry whose
            # own answer does not score 1 (an unsolvable jugs puzzle): draw again, then step down.
            # Items no answer could be wrong for (see unfit_reason) are drawn again without limit
            # other than UNFIT_TRIES.
            failures = 0
            for _ in range(UNFIT_TRIES):
                shard, idx = rng.randrange(SHARDS), rng.randrange(DATASET_SIZE)
                try:
                    entry = generate(get_dataset(self.name, level, shard), idx, SEED + 7919 * shard + idx)
                except Exception:  # noqa: BLE001 - reasoning-gym raises various errors here
                    entry = None
                if entry is not None and unfit_reason(self.name, entry, level) is not None:
                    continue
                answer = self._reference(entry, level) if entry is not None else None
                if answer is not None:
                    return level, shard, idx, entry, answer
                failures += 1
                if failures >= GENERATION_TRIES:
                    break
            if level == 0:
                raise RuntimeError(f"reasoning-gym generator {self.name!r} failed {GENERATION_TRIES} times at level 0")
            level -= 1

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        """One task at ``level``; for the generators in :data:`BALANCED`, an item whose answer's
        share is above the cap (:func:`answer_shares`) is kept with probability cap / share, so
        no answer is much more likely than another and a constant answer scores about chance."""
        level = max(0, min(int(level), self.levels - 1))
        shares, cap = answer_shares(self.name, level) if self.name in BALANCED else (None, 1.0)
        for _ in range(BALANCE_TRIES):
            drawn, shard, idx, entry, answer = self._draw(rng, level)
            if shares is None:
                break
            if rng.random() * shares.get(BALANCED[self.name].label(entry, answer), 0.0) <= cap:
                break
        meta = {"rg_dataset": self.name, "rg_level": drawn, "rg_shard": shard, "rg_entry": entry}
        if is_open_ended(self.name):
            meta["answer_is_example"] = True
        return Task(
            domain=self.slug,
            id=f"L{drawn}-{shard}-{idx}",
            prompt=str(entry["question"]) + ANSWER_INSTRUCTION,
            answer=answer,
            level=drawn,
            meta=meta,
        )


def unfit_reason(name: str, entry: dict[str, Any], level: int) -> str | None:
    """Why an item is not drawn although the generator made it: its answer could not be wrong.

    ``propositional_logic`` draws contradictory premises (about half the items from level 3), and
    from a contradiction every conclusion follows, so a constant answer passed them all.
    """
    if name == "propositional_logic":
        from reasoning_gym.logic.propositional_logic import Expression

        meta = entry["metadata"]
        premises = [Expression.from_string(p) for p in meta["premises"]]
        v = sorted(meta["variables"])[0]
        if get_dataset(name, level)._is_valid_conclusion(premises, Expression.from_string(f"({v} ∧ ¬{v})")):
            return "the premises contradict each other"
    return None


def answer_label(answer: Any) -> str:
    """The form answers are counted in for label balance (case and spacing aside)."""
    return " ".join(str(answer).split()).casefold()


@functools.lru_cache(maxsize=None)
def answer_shares(name: str, level: int) -> tuple[dict[str, float], float]:
    """``(share of each gold answer, cap)`` among the ``draws`` items of the generator's
    :class:`Balance` (fixed seeds at ``level``, four shards so that few datasets are built),
    computed once per process and level (seconds; about 40 s for knight_swap and
    polynomial_equations). Answers above the cap are thinned down to it. The cap is the rarest
    share where most answers are unique (a path, a move list: one answer such as 'infeasible' must
    not stand out), else the share of :data:`BALANCE_MIN_COUNT` items, below which a share is too
    noisy to thin by (an answer seen once may be ten times as common as that), and at least
    :data:`BALANCE_MIN_SHARE`. Generators with few answers take 8,000 draws: from 1,000, an answer
    with a true share of 2% was measured under 1%, never thinned, and a constant scored twice
    chance at that level."""
    balance = BALANCED.get(name, Balance(""))
    draws = balance.draws
    counts: Counter[str] = Counter()
    for k in range(draws):
        shard, idx = k % 4, k // 4
        try:
            entry = generate(get_dataset(name, level, shard), idx, SEED + 7919 * shard + idx)
            counts[balance.label(entry, reference_candidates(name, entry)[0])] += 1
        except Exception:  # noqa: BLE001 - reasoning-gym raises various errors here
            continue
    total = sum(counts.values()) or 1
    shares = {label: n / total for label, n in counts.items()}
    rarest = min(shares.values(), default=1.0)
    cap = rarest if len(shares) > total / 4 else max(rarest, BALANCE_MIN_COUNT / total, BALANCE_MIN_SHARE)
    return shares, cap


def is_open_ended(name: str) -> bool:
    """Whether the gold is one valid answer among many (see :mod:`trainer.verifiers.rg_score`)."""
    override = override_for(name)
    return bool(override is not None and override.open_ended)


def verifier_spec(name: str) -> dict[str, Any]:
    """The default cascade: take the ``<answer>`` tag, then the guarded generator scorer."""
    return {"stages": [
        {"type": "extract", "params": {"methods": ["answer_tag"]}},
        {"type": "rg_score", "params": {"dataset": name}, "timeout_s": 20.0},
    ]}


def _kind(cls: type) -> str:
    parts = cls.__module__.split(".")
    return KIND_BY_PACKAGE.get(parts[1] if len(parts) > 1 else "", "reasoning")


def register_all() -> list[DomainSpec]:
    """Register one domain per reasoning-gym generator."""
    from reasoning_gym.factory import DATASETS

    from trainer.verifiers.cascade import compile_cascade

    specs = []
    for name in sorted(DATASETS):
        cls = DATASETS[name][0]
        levels = level_count(name)
        slug = f"rg-{name}"
        vspec = verifier_spec(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        specs.append(register(DomainSpec(
            slug=slug,
            title=f"reasoning-gym: {name.replace('_', ' ')}",
            kind=_kind(cls),
            family=FAMILY,
            source=ReasoningGymSource(slug, name, levels),
            verify=compile_cascade(vspec),
            description=doc[0] if doc else f"reasoning-gym generator {name}",
            verifier_spec=vspec,
            task_source_spec={"family": FAMILY, "dataset": name, "levels": levels, "seed": SEED, "size": DATASET_SIZE, "shards": SHARDS,
                              "level_mapping": "curriculum.set_global_level(curriculum_levels[level])",
                              "curriculum_levels": list(curriculum_levels(name))},
        )))
    return specs
