"""Label balance of the reasoning-gym generators whose answers are imbalanced, and their answer
shares, measured once and shipped.

A generator in :data:`BALANCED` is sampled label-balanced (see
:meth:`trainer.catalogue.reasoning_gym_domains.ReasoningGymSource.sample`): an item whose answer's
share of the generator's answers is above the cap is kept with probability cap / share. The shares
come from ``draws`` items at fixed seeds per level (:func:`measure_shares`), up to 8,000 items a
level and minutes for a slow generator (puzzle24's four levels took 240 s), which every process
that sampled the domain once paid again: the first task of a run, a verifier audit, a test. They
are a pure function of the generator's version, its level's configuration and the
:class:`Balance`, so they are measured once, by ``python -m trainer.catalogue.rg_balance``, and
kept in :data:`TABLE` with a fingerprint of those inputs (:func:`fingerprint`). :func:`answer_shares`
reads an entry whose fingerprint is current and measures (once per process) any other, so a stale
or missing entry costs time, never a different sample.

Only the shares above the cap are kept (and returned): an answer at or under the cap is never
thinned, so its share is never read.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from trainer.catalogue.rg_solvers import reference_candidates
from trainer.tasks.reasoning_gym import SEED, generate, get_dataset, level_config, level_count

SHARES_VERSION = 1
"""Changes whenever :func:`measure_shares` counts differently (its fingerprints change with it)."""
TABLE = Path(__file__).with_name("rg_balance.json")
"""The measured shares: ``{"name": {"level": {"fingerprint", "cap", "above", "draws", "labels", "head"}}}``."""
HEAD = 32
"""Draws whose labels are digested in an entry's ``head`` (a cheap check that the table is the
measurement's: tests recompute it)."""


@dataclasses.dataclass(frozen=True)
class Balance:
    """Why a generator's answers are sampled label-balanced, and how its answer shares are measured."""

    reason: str
    """Which answers the generator favours (measured at levels 0 and top, 400 items each)."""
    draws: int = 1000
    """Items drawn once per level (fixed seeds) to measure each answer's share."""
    by: str = "answer"
    """What is balanced: ``"answer"`` (the reference answer), ``"numbers"`` (the puzzle's
    numbers in any order, where one puzzle has many right expressions), ``"truth table"`` (the
    conclusion's truth table over its own variables, where logically equivalent conclusions all
    pass) or ``"puzzle"`` (knight_swap's board, pieces and first move, or 'no' when it has no
    solution: a solvable puzzle has many move lists, and which one the generator gives depends on
    the process's string hashing, so a move list is not a stable label)."""

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
        if self.by == "puzzle":
            if answer_label(answer) == "no":
                return "no"
            meta = entry["metadata"]
            puzzle = {"board": {square: sorted(moves) for square, moves in meta["board"].items()},
                      "pieces": meta["pieces"], "start_turn": meta["start_turn"]}
            return "puzzle " + hashlib.sha256(json.dumps(puzzle, sort_keys=True).encode()).hexdigest()[:16]
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
    "knight_swap": Balance("'No' (impossible) is 15-20% of answers; a few puzzles recur (balanced by the puzzle, not "
                           "the move list)", by="puzzle",
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

BALANCE_MIN_COUNT = 10
"""Items an answer needs among the reference draws before its share is thinned to the others'."""
BALANCE_MIN_SHARE = 0.01
"""The lowest cap where some answers repeat: rarer answers are not thinned, so that a task takes a
few draws (more reference draws make the shares precise, not the cap lower)."""

def answer_label(answer: Any) -> str:
    """The form answers are counted in for label balance (case and spacing aside)."""
    return " ".join(str(answer).split()).casefold()


def fingerprint(name: str, level: int) -> str:
    """What an entry's shares depend on: the generator's version and its level's configuration on
    each shard measured, the :class:`Balance`, the seeds, the cap's constants, the code that
    labels and counts the draws (:func:`code_digest`) and :data:`SHARES_VERSION`."""
    import reasoning_gym  # lazy: the generator library loads with the catalogue, not with this module

    balance = BALANCED.get(name, Balance(""))
    inputs = {"shares_version": SHARES_VERSION, "reasoning_gym": reasoning_gym.__version__, "seed": SEED,
              "draws": balance.draws, "by": balance.by, "configs": [repr(level_config(name, level, s)) for s in range(4)],
              "min_count": BALANCE_MIN_COUNT, "min_share": BALANCE_MIN_SHARE, "code": code_digest()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """The digest of the code an entry is measured with: the reference solvers' module, the
    labels, the draws and their seeding, the count and the cap. A change to any of it makes every
    entry stale (measured again), so a table is never read by code that would measure otherwise."""
    from trainer.catalogue import rg_solvers  # lazy: only a fingerprint reads the solvers' source
    from trainer.tasks import reasoning_gym as tasks  # lazy: as above

    parts = [inspect.getsource(rg_solvers), inspect.getsource(Balance), inspect.getsource(tasks.generate)]
    parts += [inspect.getsource(f) for f in (answer_label, draw_labels, measure_shares)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def draw_labels(name: str, level: int, draws: int) -> list[tuple[int, str]]:
    """``(draw, label)`` of the first ``draws`` reference items at ``level`` (fixed seeds, four
    shards so that few datasets are built); a draw the generator fails on has no label."""
    balance = BALANCED.get(name, Balance(""))
    labels = []
    for k in range(draws):
        shard, idx = k % 4, k // 4
        try:
            entry = generate(get_dataset(name, level, shard), idx, SEED + 7919 * shard + idx)
            labels.append((k, balance.label(entry, reference_candidates(name, entry)[0])))
        except Exception:  # noqa: BLE001 - reasoning-gym raises various errors here
            continue
    return labels


def head_digest(labels: list[tuple[int, str]]) -> str:
    """The digest of the labels of the first :data:`HEAD` draws."""
    return hashlib.sha256("\n".join(f"{k}:{label}" for k, label in labels if k < HEAD).encode()).hexdigest()[:24]


def measure_shares(name: str, level: int) -> dict[str, Any]:
    """Measure one level's entry: each gold answer's share among the ``draws`` items of the
    generator's :class:`Balance`, and the cap. Answers above the cap are thinned down to it. The
    cap is the rarest share where most answers are unique (a path, a move list: one answer such as
    'infeasible' must not stand out), else the share of :data:`BALANCE_MIN_COUNT` items, below
    which a share is too noisy to thin by (an answer seen once may be ten times as common as
    that), and at least :data:`BALANCE_MIN_SHARE`. Generators with few answers take 8,000 draws:
    from 1,000, an answer with a true share of 2% was measured under 1%, never thinned, and a
    constant scored twice chance at that level."""
    labels = draw_labels(name, level, BALANCED.get(name, Balance("")).draws)
    counts = Counter(label for _, label in labels)
    total = sum(counts.values()) or 1
    shares = {label: n / total for label, n in counts.items()}
    rarest = min(shares.values(), default=1.0)
    cap = rarest if len(shares) > total / 4 else max(rarest, BALANCE_MIN_COUNT / total, BALANCE_MIN_SHARE)
    return {"fingerprint": fingerprint(name, level), "cap": cap, "draws": total, "labels": len(shares),
            "head": head_digest(labels), "above": {label: s for label, s in sorted(shares.items()) if s > cap}}


@functools.lru_cache(maxsize=1)
def shipped() -> dict[str, Any]:
    """The table as shipped (empty when it is missing or unreadable: every entry is then measured)."""
    try:
        return json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=None)
def answer_shares(name: str, level: int) -> tuple[dict[str, float], float]:
    """``(share of each gold answer above the cap, cap)`` at ``level``: the shipped entry when its
    fingerprint is current, else measured once per process (:func:`measure_shares`)."""
    entry = shipped().get(name, {}).get(str(level))
    if entry is None or entry.get("fingerprint") != fingerprint(name, level):
        entry = measure_shares(name, level)
    return dict(entry["above"]), float(entry["cap"])


def _measure(item: tuple[str, int]) -> tuple[str, int, dict[str, Any]]:
    import warnings  # lazy: only the measuring processes silence the generators

    warnings.simplefilter("ignore")
    return item[0], item[1], measure_shares(*item)


def main(argv: list[str] | None = None) -> int:
    """Measure the entries that are missing or stale and write :data:`TABLE` (each as it comes)."""
    import multiprocessing  # lazy: only the command measures in parallel

    from tqdm import tqdm  # lazy: only the command shows progress

    ap = argparse.ArgumentParser(prog="python -m trainer.catalogue.rg_balance", description=main.__doc__)
    ap.add_argument("--workers", type=int, default=2, help="processes measuring at once")
    ap.add_argument("--names", nargs="*", help="generators (default: every one in BALANCED)")
    ap.add_argument("--check", action="store_true", help="only say which entries are missing or stale; exit 1 if any")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.names or ()) - set(BALANCED))
    if unknown:
        ap.error(f"--names: {', '.join(unknown)} not label-balanced; the balanced generators are {', '.join(sorted(BALANCED))}")
    table = {name: dict(levels) for name, levels in shipped().items() if name in BALANCED}
    todo = [(name, level) for name in sorted(args.names or BALANCED) for level in range(level_count(name))
            if table.get(name, {}).get(str(level), {}).get("fingerprint") != fingerprint(name, level)]
    todo.sort(key=lambda item: (item[1], item[0]))  # the low levels, which every sample and audit uses, first
    if args.check:
        for name, level in todo:
            print(f"{name} level {level}: missing or stale")
        return 1 if todo else 0
    with multiprocessing.get_context("spawn").Pool(max(1, args.workers)) as pool:
        for name, level, entry in tqdm(pool.imap_unordered(_measure, todo), total=len(todo), desc="answer shares", unit="level"):
            table.setdefault(name, {})[str(level)] = entry
            _write(table)
    _write(table)
    return 0


def _write(table: dict[str, Any]) -> None:
    """Write the table whole (levels a generator no longer has left out) or not at all."""
    ordered = {n: {lv: table[n][lv] for lv in sorted(table[n], key=int) if int(lv) < level_count(n)} for n in sorted(table)}
    partial = TABLE.with_suffix(".json.partial")
    partial.write_text(json.dumps(ordered, indent=1, ensure_ascii=False) + "\n")
    os.replace(partial, TABLE)


if __name__ == "__main__":
    sys.exit(main())
