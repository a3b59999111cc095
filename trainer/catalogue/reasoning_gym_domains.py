"""Every reasoning-gym generator as its own domain, ``rg-<name>``, verified by its own
``score_answer``.

Levels come from the generator's curriculum: level ``k`` sets every curriculum attribute to
``min(k, its last level)`` (reasoning-gym's ``set_global_level``), so a domain has as many
levels as its longest attribute; generators without a curriculum have one level (defaults).
Some curricula define top levels whose configuration the generator itself rejects; a domain's
levels stop before the first such level. A task is item ``idx`` of dataset shard ``shard`` at its
level (a fixed seed per level and shard; some generators build items in ``__init__``, so shards
stay small), both drawn from the caller's rng: the same rng state always gives the same task.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
import threading
import warnings
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.registry import DomainSpec, register
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

# score_answer of game_of_life_halting compares bool("False") == bool("True"), so any non-empty
# answer scores 1.0 (reasoning-gym 0.1.25); those domains are checked by exact match instead.
EXACT_MATCH_OVERRIDES = frozenset({"game_of_life_halting"})

# Curriculum levels the domain stops below (reasoning-gym 0.1.25, measured on a 2-core machine):
# jugs takes seconds per item or fails from level 2; rubiks_cube from level 1 uses cubes larger
# than 3x3 whose wide-move notation has no reference solution here.
LEVEL_CAPS = {"jugs": 2, "rubiks_cube": 1}
# Curriculum levels left out because drawing one task takes seconds to tens of seconds
# (sokoban's level 0 packs 4-10 boxes into a 6x6 board; its level 1 takes milliseconds).
SLOW_LEVELS = {"sokoban": frozenset({0})}

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
        """The first reference candidate the generator's own scorer gives 1.0 (None if none does)."""
        from trainer.catalogue.rg_solvers import reference_candidates

        if self.name in EXACT_MATCH_OVERRIDES:
            return str(entry["answer"])
        scorer = get_dataset(self.name, level)
        for candidate in reference_candidates(self.name, entry):
            try:
                if float(scorer.score_answer(candidate, entry)) >= 1.0:
                    return candidate
            except Exception:  # noqa: BLE001
                continue
        return None

    def sample(self, rng: random.Random, level: int = 0) -> Task:

        level = max(0, min(int(level), self.levels - 1))
        while True:
            # Some generators fail on some seeds at their hardest settings, or emit an entry whose
            # own answer does not score 1 (an unsolvable jugs puzzle): draw again, then step down.
            for _ in range(GENERATION_TRIES):
                shard, idx = rng.randrange(SHARDS), rng.randrange(DATASET_SIZE)
                try:
                    entry = _generate(get_dataset(self.name, level, shard), idx, SEED + 7919 * shard + idx)
                except Exception:  # noqa: BLE001 - reasoning-gym raises various errors here
                    continue
                answer = self._reference(entry, level)
                if answer is not None:
                    break
            else:
                if level == 0:
                    raise RuntimeError(f"reasoning-gym generator {self.name!r} failed {GENERATION_TRIES} times at level 0")
                level -= 1
                continue
            break
        return Task(
            domain=self.slug,
            id=f"L{level}-{shard}-{idx}",
            prompt=str(entry["question"]) + ANSWER_INSTRUCTION,
            answer=answer,
            level=level,
            meta={"rg_dataset": self.name, "rg_level": level, "rg_shard": shard, "rg_entry": entry},
        )


def verifier_spec(name: str) -> dict[str, Any]:
    """The default cascade: take the ``<answer>`` tag, then the generator's score_answer."""
    check = {"type": "exact"} if name in EXACT_MATCH_OVERRIDES else {"type": "rg_score", "params": {"dataset": name}}
    return {"stages": [{"type": "extract", "params": {"methods": ["answer_tag"]}}, {**check, "timeout_s": 20.0}]}


def score(answer: str, task: Task, dataset: str | None = None) -> Verification:
    """Score an extracted answer with the generator's ``score_answer`` (1 pass, 0 fail, else partial)."""
    name = dataset or task.meta["rg_dataset"]
    entry = task.meta["rg_entry"]
    ds = get_dataset(name, int(task.meta.get("rg_level", 0)))  # scoring needs the level's config, not the shard's items
    try:
        value = float(ds.score_answer(answer, entry))
    except Exception as exc:  # noqa: BLE001 - a malformed answer can make score_answer raise
        return Verification.failed(Outcome.PARSE_ERROR, error=f"score_answer raised {type(exc).__name__}: {exc}"[:500], found=answer[:200])
    details = {"expected": task.answer, "found": answer[:500], "rg_score": value}
    if value >= 1.0:
        return Verification.passed(**details)
    if value <= 0.0:
        return Verification.failed(**details)
    return Verification(Outcome.PARTIAL, value, details)


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
