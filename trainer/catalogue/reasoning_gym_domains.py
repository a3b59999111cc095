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

import contextlib
import dataclasses
import functools
import io
import json
import random
import threading
import warnings
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.catalogue import DomainSpec, register
from trainer.tasks.base import Task

FAMILY = "reasoning_gym"
DATASET_SIZE = 2_000
SHARDS = 500
GENERATION_TRIES = 5
SEED = 20_251_129
ANSWER_INSTRUCTION = "\n\nGive your final answer inside <answer></answer> tags."

KIND_BY_PACKAGE = {
    "arithmetic": "math",
    "algebra": "math",
    "geometry": "math",
    "probability": "math",
    "code": "code",
}

# Curriculum levels the domain stops below (reasoning-gym 0.1.19, measured on a 2-core machine):
# jugs takes seconds per item or fails from level 2; rubiks_cube from level 1 uses cubes larger
# than 3x3 whose wide-move notation has no reference solution here; arc_1d from level 2 (grids
# of 50+ cells) can draw ten or more blocks in task_recolor_blocks_from_palette, which then loops
# forever looking for ten distinct colours among 1-9; number_sequence from level 1 can nest
# squarings until one term has millions of digits (a single multiplication that runs for minutes).
LEVEL_CAPS = {"jugs": 2, "rubiks_cube": 1, "arc_1d": 2, "number_sequence": 1}
# Curriculum levels left out because drawing one task takes seconds to tens of seconds
# (sokoban's level 0 packs 4-10 boxes into a 6x6 board; its level 1 takes milliseconds).
SLOW_LEVELS = {"sokoban": frozenset({0})}



@dataclasses.dataclass(frozen=True)
class Balance:
    """Why a generator's answers are sampled label-balanced, and how its answer shares are measured."""

    reason: str
    """Which answers the generator favours (measured at levels 0 and top, 400 items each)."""
    draws: int = 1000
    """Items drawn once per level (fixed seeds) to measure each answer's share."""


# Label balance: generators whose answers come from a small set, or where a few answers are much
# more common than the rest, so that a constant answer beats chance (the rate at which another
# task's gold is right; measured with bench/rg_scorers.py). sample() keeps an item with
# probability (rarest share / its answer's share), so every answer is about equally likely.
BALANCED: dict[str, Balance] = {
    "acre": Balance("on / off / undetermined: 39% / 32% / 29%", draws=400),
    "basic_arithmetic": Balance("0, -1 and 1 are 22% of level-0 answers (chance 3%)", draws=2000),
    "binary_alternation": Balance("-1 (impossible) is 19-23% of answers"),
    "chain_sum": Balance("small sums repeat at level 0: 0 alone is 4.5% (chance 1.5%)"),
    "circuit_logic": Balance("0 / 1: 63% / 37%", draws=400),
    "count_bits": Balance("the middle counts dominate: 23% for one of nine answers at level 0"),
    "gcd": Balance("1 is 58% of top-level answers, 1 and 2 are 54% at level 0", draws=2000),
    "graph_color": Balance("the same small graphs (and so the same colouring) recur: one colouring was "
                           "right for 17% of tasks against 4% for another task's colouring"),
    "knight_swap": Balance("'No' (impossible) is 15-20% of answers; every possible puzzle has its own move list",
                           draws=100),
    "largest_island": Balance("10 is 49% of level-0 answers"),
    "letter_counting": Balance("1 is 32-46% of answers"),
    "manipulate_matrix": Balance("an all-zero matrix or a 1x1 '0' is 2% of answers (chance 0.3%)"),
    "maze": Balance("a few path lengths dominate at level 0 (19% for one of six)"),
    "number_sequence": Balance("small next terms repeat: 4 was the answer to 25% of tasks (chance 6%)"),
    "polynomial_equations": Balance("the root 0.0 alone is 46% of level-0 answers, 17% at the top", draws=200),
    "products": Balance("0 is 2% of answers (chance 0.2%)"),
    "rectangle_count": Balance("small counts repeat: 4 was the answer to 25% of tasks (chance 6%)"),
    "rotten_oranges": Balance("-1 (some orange never rots) is about a third of answers"),
    "sentence_reordering": Balance("the corpus is small, so sentences recur: one was the answer to 17% of tasks"),
    "shortest_path": Balance("'infeasible' is 45% of level-0 answers and 69% at the top; other answers are paths"),
    "syllogism": Balance("Yes / No: 91% / 9% at level 0, 71% / 29% at the top", draws=400),
}
UNFIT_TRIES = 256
"""Draws at most for one item when items are unfit (see :func:`unfit_reason`)."""
BALANCE_TRIES = 256
"""Draws at most per sample of a balanced generator (then the last draw is kept)."""
BALANCE_MIN_COUNT = 10
"""Items an answer needs among the reference draws before its share is thinned to the others'."""

COMPOSITE_DEFAULT = [("basic_arithmetic", 1.0), ("chain_sum", 1.0), ("leg_counting", 1.0)]

_lock = threading.Lock()
_datasets: dict[tuple[str, int, int], Any] = {}


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


@functools.lru_cache(maxsize=None)
def curriculum_levels(name: str) -> tuple[int | None, ...]:
    """Domain level i -> the curriculum level it uses (None: the generator's default config).

    Curriculum levels whose configuration the generator rejects are left out.
    """
    from reasoning_gym.factory import CURRICULA, create_curriculum

    if name not in CURRICULA:
        return (None,)
    curriculum = create_curriculum(name)
    top = max((len(a.levels) for a in curriculum.attributes.values()), default=1)
    top = min(top, LEVEL_CAPS.get(name, top))
    valid = []
    for level in range(top):
        if level in SLOW_LEVELS.get(name, ()):
            continue
        try:
            config = _config(name, level, 0)
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, ValueError, TypeError):
            continue
        valid.append(level)
    return tuple(valid) or (None,)


def level_count(name: str) -> int:
    """How many difficulty levels the domain has (1 without a usable curriculum)."""
    return len(curriculum_levels(name))


def _config(name: str, curriculum_level: int | None, shard: int) -> Any:
    from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum

    _, config_cls = DATASETS[name]
    base = {"seed": SEED + 1000 * (curriculum_level or 0) + 10_000_000 * shard, "size": DATASET_SIZE}
    if name == "composite":
        from reasoning_gym.composite import DatasetSpec

        return config_cls(datasets=[DatasetSpec(n, w, {}) for n, w in COMPOSITE_DEFAULT], **base)
    if curriculum_level is None or name not in CURRICULA:
        return config_cls(**base)
    curriculum = create_curriculum(name)
    curriculum.set_global_level(curriculum_level)
    return curriculum.generate_configuration(base)


def level_config(name: str, level: int, shard: int = 0) -> Any:
    """The generator's config object at domain ``level`` (seed fixed per level and shard)."""
    levels = curriculum_levels(name)
    return _config(name, levels[max(0, min(level, len(levels) - 1))], shard)


def get_dataset(name: str, level: int, shard: int = 0) -> Any:
    """The (cached) dataset object for a generator at a level and shard."""
    key = (name, level, shard)
    with _lock:
        dataset = _datasets.get(key)
    if dataset is None:
        from reasoning_gym.factory import DATASETS

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = DATASETS[name][0](level_config(name, level, shard))
        with _lock:
            if len(_datasets) > 512:
                _datasets.clear()
            dataset = _datasets.setdefault(key, dataset)
    return dataset


def _generate(dataset: Any, idx: int, seed: int) -> dict[str, Any]:
    """``dataset[idx]`` with the global ``random`` (and numpy) state seeded: some generators
    (codeio runs sample programs) draw from the global generators, not their own."""
    import sys

    state = random.getstate()
    np = sys.modules.get("numpy")
    np_state = np.random.get_state() if np is not None else None
    random.seed(seed)
    if np is not None:
        np.random.seed(seed % 2**32)
    try:
        return dataset[idx]
    finally:
        random.setstate(state)
        if np is not None:
            np.random.set_state(np_state)


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
        from trainer.catalogue.rg_solvers import reference_candidates

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
                    entry = _generate(get_dataset(self.name, level, shard), idx, SEED + 7919 * shard + idx)
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
            if rng.random() * shares.get(answer_label(answer), 0.0) <= cap:
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
    noisy to thin by (an answer seen once may be ten times as common as that)."""
    from collections import Counter

    from trainer.catalogue.rg_solvers import reference_candidates

    draws = BALANCED[name].draws if name in BALANCED else Balance("").draws
    counts: Counter[str] = Counter()
    for k in range(draws):
        shard, idx = k % 4, k // 4
        try:
            entry = _generate(get_dataset(name, level, shard), idx, SEED + 7919 * shard + idx)
            counts[answer_label(reference_candidates(name, entry)[0])] += 1
        except Exception:  # noqa: BLE001 - reasoning-gym raises various errors here
            continue
    total = sum(counts.values()) or 1
    shares = {label: n / total for label, n in counts.items()}
    rarest = min(shares.values(), default=1.0)
    cap = rarest if len(shares) > total / 4 else max(rarest, BALANCE_MIN_COUNT / total)
    return shares, cap


def is_open_ended(name: str) -> bool:
    """Whether the gold is one valid answer among many (see :mod:`trainer.verifiers.rg_score`)."""
    from trainer.verifiers.rg_score import override_for

    override = override_for(name)
    return bool(override is not None and override.open_ended)


def verifier_spec(name: str) -> dict[str, Any]:
    """The default cascade: take the ``<answer>`` tag, then the guarded generator scorer."""
    return {"stages": [
        {"type": "extract", "params": {"methods": ["answer_tag"]}},
        {"type": "rg_score", "params": {"dataset": name}, "timeout_s": 20.0},
    ]}


def judge(answer: str, entry: dict[str, Any], name: str, level: int, gold: str) -> Verification:
    """Temper's verdict on an extracted ``answer`` for ``entry``: the guards, then the generator's
    scorer (or its override), then the reward mapping (:mod:`trainer.verifiers.rg_score`)."""
    from trainer.verifiers.rg_score import guard_reason, override_for, reward_of, scorer_for

    override = override_for(name)
    details: dict[str, Any] = {"expected": gold, "found": answer[:500]}
    if answer.endswith(".") and not gold.endswith(".") and not answer.endswith(".."):
        answer = answer[:-1].rstrip()  # a sentence's full stop, not part of the answer
    reason = guard_reason(answer, gold, override)
    if reason is not None:
        return Verification.failed(error=reason, **details)
    ds = get_dataset(name, level)  # scoring needs the level's config, not the shard's items
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")  # some scorers warn or print about malformed answers
            value = float(scorer_for(name)(answer, entry, ds))
    except Exception as exc:  # noqa: BLE001 - a malformed answer can make score_answer raise
        return Verification.failed(Outcome.PARSE_ERROR, error=f"score_answer raised {type(exc).__name__}: {exc}"[:500], found=answer[:200])
    reward = reward_of(value, override)
    details["rg_score"] = value
    if reward >= 1.0:
        return Verification.passed(**details)
    if reward <= 0.0:
        return Verification.failed(**details)
    return Verification(Outcome.PARTIAL, reward, details)


def score(answer: str, task: Task, dataset: str | None = None) -> Verification:
    """Verify an extracted answer for a task (see :func:`judge`): 1 pass, 0 fail, else partial."""
    name = dataset or task.meta["rg_dataset"]
    return judge(answer, task.meta["rg_entry"], name, int(task.meta.get("rg_level", 0)), str(task.answer))


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
