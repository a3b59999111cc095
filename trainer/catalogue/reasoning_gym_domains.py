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
Generators whose answers are imbalanced (:data:`trainer.catalogue.rg_balance.BALANCED`) are sampled label-balanced, so that a
constant answer scores no better than chance; items no answer could be wrong for are not drawn
(:func:`unfit_reason`).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from trainer.outcomes import Outcome
from trainer.catalogue import DomainSpec, register
from trainer.catalogue.rg_balance import BALANCED, answer_shares
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




UNFIT_TRIES = 256
"""Draws at most for one item when items are unfit (see :func:`unfit_reason`)."""
BALANCE_TRIES = 256
"""Draws at most per sample of a balanced generator (then the last draw is kept)."""




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
            description=doc[0] if doc else f"reasoning-gym generator {name}",
            verifier_spec=vspec,
            task_source_spec={"family": FAMILY, "dataset": name, "levels": levels, "seed": SEED, "size": DATASET_SIZE, "shards": SHARDS,
                              "level_mapping": "curriculum.set_global_level(curriculum_levels[level])",
                              "curriculum_levels": list(curriculum_levels(name))},
        )))
    return specs
