"""reasoning-gym's generators at Temper's levels: which curriculum level a domain level uses, the
(cached) dataset object for a level and shard, and one item drawn with the global random state
seeded. The task sources (:mod:`trainer.catalogue.reasoning_gym_domains`) draw from these, and the
verifier (:mod:`trainer.verifiers.rg_score`) scores against the level's dataset object.

reasoning_gym itself is imported inside the functions: it takes seconds, and only a process that
draws or scores needs it.
"""
from __future__ import annotations

import functools
import random
import sys
import threading
import warnings
from typing import Any

DATASET_SIZE = 2_000
SEED = 20_251_129

# Curriculum levels the domain stops below (reasoning-gym 0.1.19, measured on a 2-core machine):
# jugs takes seconds per item or fails from level 2; rubiks_cube from level 1 uses cubes larger
# than 3x3 whose wide-move notation has no reference solution here; arc_1d from level 2 (grids
# of 50+ cells) can draw ten or more blocks in task_recolor_blocks_from_palette, which then loops
# forever looking for ten distinct colours among 1-9; number_sequence from level 1 can nest
# squarings until one term has millions of digits (a single multiplication that runs for minutes);
# bf from level 2 (difficulty 3) loops to targets up to 626 in 8-bit cells, which wrap before they
# reach a target above 255, so the interpreter that computes the answer never stops; game_of_life
# from level 1 (25x25 and larger boards) almost always ends all dead (58 of 60 tasks), so the
# reward would say nothing.
LEVEL_CAPS = {"jugs": 2, "rubiks_cube": 1, "arc_1d": 2, "number_sequence": 1, "bf": 2, "game_of_life": 1}
# Curriculum levels left out because drawing one task takes seconds to tens of seconds
# (sokoban's level 0 packs 4-10 boxes into a 6x6 board; its level 1 takes milliseconds).
SLOW_LEVELS = {"sokoban": frozenset({0})}

COMPOSITE_DEFAULT = [("basic_arithmetic", 1.0), ("chain_sum", 1.0), ("leg_counting", 1.0)]

_lock = threading.Lock()
_datasets: dict[tuple[str, int, int], Any] = {}


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


def generate(dataset: Any, idx: int, seed: int) -> dict[str, Any]:
    """``dataset[idx]`` with the global ``random`` (and numpy) state seeded: some generators
    (codeio runs sample programs) draw from the global generators, not their own."""
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
