"""reasoning-gym scoring: the generator's own ``score_answer``, behind Temper's guards.

The task carries the generator name, level and the original entry in ``task.meta`` (see
:mod:`trainer.catalogue.reasoning_gym_domains`). Upstream scorers were written for evaluation,
not as rewards a policy optimises against, and several can be gamed: a hedge (``X or Y``) is read
as its first number, a prefix of the gold scores 1, ``nan`` compares as close, a parseable wrong
answer earns format credit, the answer is handed to ``eval``. Temper therefore scores an answer in
three steps:

1. :func:`guard_reason` refuses, before any scorer sees it, an answer that states a non-finite
   number the gold does not, hedges against the gold (:func:`trainer.verifiers.answers.hedge_reason`,
   except where the gold is one valid answer among many), or, for scorers that evaluate the answer,
   is anything but a plain arithmetic expression;
2. the generator's ``score_answer`` runs, unless :data:`OVERRIDES` replaces it with a stricter one;
3. :func:`reward_of` maps the score to a reward: 1 when the scorer accepts the answer fully (at or
   above the override's ``pass_at``), the score itself where the override says partial credit is
   earned (a valid but longer solution), else 0. Format credit, similarity to the gold and length
   ratios are not earned.

Every override and guard is listed, with its reason, in docs/domains.md ("reasoning-gym:
overrides of upstream scorers").

>>> guard_reason("3 or 5", "5", None)
"hedged answer: 'or' joins several values (the gold has none)"
>>> guard_reason("nan", "0.375", None)
"non-finite number 'nan'"
>>> guard_reason("__import__('os')", "x**2/2 + C", OVERRIDES["simple_integration"])
"character '_' is not allowed in an expression"
>>> guard_reason("5", "5", None) is None
True
>>> reward_of(0.5, OVERRIDES["shortest_path"]), reward_of(0.01, None), reward_of(1.0, None)
(0.5, 0.0, 1.0)
"""
from __future__ import annotations

import cmath
import contextlib
import importlib
import io
import json
import math
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.tasks.reasoning_gym import get_dataset
from trainer.verifiers.answers import hedge_reason
from trainer.verifiers.expressions import expression_reason, nonfinite_reason
from trainer.verifiers.rg_formats import exact_text, same_word, same_words, strict_grid, upstream_score

Scorer = Callable[[str, dict[str, Any], Any], float]
"""``(answer, entry, dataset) -> score`` in [0, 1]; ``dataset`` is the generator's dataset object."""


def rg_score(completion: str, task: Task, *, dataset: str | None = None) -> Verification:
    """Stage ``rg_score``: score the (extracted) answer with reasoning-gym, behind the guards."""
    return score(completion.strip(), task, dataset)


def _warm_rg_score() -> None:
    """reasoning-gym's import (about a second on a loaded machine), done off a stage's clock
    (:mod:`trainer.verifiers.isolation`)."""
    importlib.import_module("reasoning_gym.factory")


rg_score.warm_up = _warm_rg_score  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Override:
    """How Temper scores one generator instead of (or around) its own ``score_answer``."""

    reason: str
    """What the upstream scorer gets wrong (listed in docs/domains.md)."""
    score: Scorer | None = None
    """Replacement scorer; None keeps the upstream ``score_answer``."""
    pass_at: float = 1.0
    """The score from which the answer passes (reward 1)."""
    earned: Callable[[float], bool] | None = None
    """Which scores below ``pass_at`` are earned partial credit, paid as they are (None: none)."""
    open_ended: bool = False
    """The gold is one valid answer among many, so separators are not counted against it (the
    scorer parses the whole answer strictly instead)."""
    expression: str = ""
    """The scorer evaluates the answer (sympy ``parse_expr``), so only a plain arithmetic
    expression reaches it: ``"numbers"`` (numbers and operators) or ``"symbols"`` (also the
    gold's names, ``C``/``c`` and :data:`~trainer.verifiers.expressions.FUNCTIONS`); empty for scorers that do not evaluate."""


# --- guards -------------------------------------------------------------------------------------

MAX_OPEN_ENDED_CHARS = 20_000
"""Longest answer scored where the gold is only an example (plans, ladders, move lists)."""


def guard_reason(answer: str, gold: str, override: Override | None) -> str | None:
    """Why ``answer`` fails before any scorer sees it, else None (see the module docstring)."""
    reason = nonfinite_reason(answer, gold)
    if reason is not None:
        return reason
    if override is None or not override.open_ended:
        reason = hedge_reason(answer, gold)
        if reason is not None:
            return f"hedged answer: {reason}"
    elif len(answer) > MAX_OPEN_ENDED_CHARS:
        return f"the answer is {len(answer)} characters long (at most {MAX_OPEN_ENDED_CHARS})"
    if override is not None and override.expression:
        return expression_reason(answer, gold, names=override.expression == "symbols")
    return None


def reward_of(value: float, override: Override | None) -> float:
    """The reward for a scorer's value: 1 at or above ``pass_at``; the value where the override
    says it is earned partial credit; else 0 (format credit, similarity, length ratios)."""
    if not math.isfinite(value) or value <= 0:
        return 0.0
    if value >= (override.pass_at if override else 1.0):
        return 1.0
    if override is not None and override.earned is not None and override.earned(value):
        return min(1.0, value)
    return 0.0


# --- stricter scorers ---------------------------------------------------------------------------

def _exact(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer is the gold's text (case and surrounding whitespace aside)."""
    return float(answer.strip().casefold() == str(entry["answer"]).strip().casefold())



def _n_queens(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the board is one of the valid solutions, as written (no ``eval`` of the answer)."""
    return float(answer in entry["metadata"]["valid_answers"] or answer.strip() in entry["metadata"]["valid_answers"])


def _coin_flip(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer's value (decimal or fraction) is within 1e-4 of the gold's; no credit
    for a matching prefix (upstream: ``0`` scores 1 against ``0.375``)."""
    try:
        value = float(Fraction(answer.replace(",", "").strip()))
        gold = float(Fraction(str(entry["answer"]).replace(",", "").strip()))
    except (ValueError, ZeroDivisionError):
        return 0.0
    return float(math.isfinite(value) and abs(value - gold) <= 1e-4)


_ONE_NUMBER = re.compile(r"[-+]?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _one_number(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the whole answer is one number (``$`` and thousands commas allowed) equal to the
    gold (upstream reads the first number anywhere in the answer)."""
    text = answer.strip()
    if not _ONE_NUMBER.fullmatch(text):
        return 0.0
    try:
        return float(float(text.replace("$", "").replace(",", "").replace(" ", "")) == float(entry["answer"]))
    except ValueError:
        return 0.0


def _puzzle24(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """1 when the expression uses exactly the task's four numbers and equals 24 exactly (upstream
    checks only that four numbers in range are used, so ``1*2*3*4`` solved every task, and
    truncates the value with ``int``)."""
    from sympy import Rational
    from sympy.parsing.sympy_parser import parse_expr

    used = sorted(int(n) for n in re.findall(r"\d+", answer))
    if used != sorted(int(n) for n in entry["metadata"]["numbers"]):
        return 0.0
    try:
        value = parse_expr(answer.strip(), evaluate=True)
    except Exception:  # noqa: BLE001 - a malformed expression is a wrong answer
        return 0.0
    return float(value == Rational(24))


def _rush_hour(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer is only moves (``A+2 B-1 ...``), every move is legal in full, and car A
    reaches the exit with the last move and not before. Upstream ignores text that is not a move,
    moves a blocked piece as far as it goes and ignores moves of unknown pieces, so a wrong last
    move (``A+5`` where ``A+3`` ends it) or moves after the end still passed."""
    from reasoning_gym.games.rush_hour import Board

    moves = answer.split()
    if not moves or not all(re.fullmatch(r"[A-Z][+-]\d+", m) for m in moves):
        return 0.0
    try:
        board = Board(entry["metadata"]["board_config"])
    except ValueError:
        return 0.0
    for k, move in enumerate(moves):
        if board.solved:
            return 0.0  # moves after the exit was reached
        i, steps = ord(move[0]) - ord("A"), int(move[1:])
        if steps == 0 or i >= len(board._pieces) or board._pieces[i].fixed:
            return 0.0
        piece = board._pieces[i]
        before = piece.position
        board.move(move[0], steps)
        if piece.position != before + steps * piece.stride:
            return 0.0  # blocked: the move is not legal as written
    return float(board.solved)


def _sokoban(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """1 when the answer is only ``L R U D`` moves, each one moves the player, and the last one
    (not an earlier one) solves the puzzle. Upstream ignores every other character and moves
    into walls, so text around a solution (``X or Y``) could still pass."""
    # lazy: numpy costs ~80 ms to import; like sympy and reasoning_gym, it is loaded by the scorer
    # that needs it, so reading the override table (override_for) imports no third-party package.
    import numpy as np

    moves = answer.strip()
    if not moves or not re.fullmatch(r"[LRUD]+", moves):
        return 0.0
    try:
        rows = [list(line) for line in entry["metadata"]["gamestr"].replace(" ", "").strip().split("\n")]
        matrix = np.array(rows)
        game = dataset._Game(height=matrix.shape[0], width=matrix.shape[1])
        game.load_puzzle_matrix(matrix)
        for k, move in enumerate(moves):
            if dataset._is_solved(game.get_curr_state()):
                return 0.0  # moves after the puzzle was solved
            if not game.player.update(key=move):
                return 0.0  # a move that does not move the player
        return float(dataset._is_solved(game.get_curr_state()))
    except Exception:  # noqa: BLE001 - the game raises on moves off the board
        return 0.0


_HANOI_MOVE = re.compile(r"Move disk \d+ from Peg \d+ to Peg \d+")


def _hanoi(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream score, only when every non-empty line is exactly one move."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if not lines or not all(_HANOI_MOVE.fullmatch(line) for line in lines):
        return 0.0
    return float(dataset.score_answer(answer, entry))


_FRACTION = re.compile(r"(\$?)\s*(?:\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|(\d+)\s*/\s*(\d+))\s*\1", re.I)


def _fraction(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the whole answer is one fraction (``a/b`` or ``\\frac{a}{b}``) in lowest terms equal
    to the gold (upstream reads a fraction at the start and ignores the rest)."""
    m = _FRACTION.fullmatch(answer.strip())
    if m is None:
        return 0.0
    numerator, denominator = (int(g) for g in (m.group(2, 3) if m.group(2) else m.group(4, 5)))
    meta = entry["metadata"]
    return float((numerator, denominator) == (meta["simplified_numerator"], meta["simplified_denominator"]))


_BUTTONS = re.compile(r"[A-C](?:\s*(?:→|->|,)?\s*[A-C])*", re.I)


def _quantum_lock(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream score, only when the whole answer is a button sequence (upstream keeps every
    letter A-C found anywhere in the answer, words included), and only for a shortest sequence:
    the prompt asks for the shortest, and upstream's 0.5 for a longer one that reaches the target
    paid a wrong guess followed by the gold (``w -> g``) whenever the two reached it together."""
    if not _BUTTONS.fullmatch(answer.strip()):
        return 0.0
    value = float(dataset.score_answer(answer, entry))
    return value if value >= 1.0 else 0.0


_PROBE_POINTS = (0.37, 1.29, 2.03, -0.61, 3.7)


def _antiderivative(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer's derivative is the integrand: upstream's check (``simplify(F' - f) ==
    0``), after a numeric check at a few points that rejects a wrong answer at once (upstream's
    ``simplify`` on a wrong answer can run for minutes, which only the stage timeout stops)."""
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    meta = entry["metadata"]
    x = sympy.Symbol(meta["variable"])
    constants = {"C": sympy.Symbol("C"), "c": sympy.Symbol("c")}
    try:
        difference = sympy.diff(parse_expr(answer, local_dict={meta["variable"]: x, **constants}), x) \
            - parse_expr(meta["integrand"], local_dict={meta["variable"]: x})
    except Exception:  # noqa: BLE001 - a malformed expression is a wrong answer
        return 0.0
    for point in _PROBE_POINTS:
        try:
            value = complex(difference.subs(x, point).subs(constants["C"], 1).subs(constants["c"], 1).evalf(15))
        except (TypeError, ValueError, ZeroDivisionError):
            continue  # a singular point
        if math.isfinite(abs(value)) and abs(value) > 1e-6:
            return 0.0
    return float(sympy.simplify(difference) == 0)


def _complex(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream score, only for a finite number (upstream scores min(1, exp(-distance)), and
    min(1.0, nan) is 1.0, so ``nan`` or ``nani`` passed)."""
    try:
        value = dataset.parse_string_to_complex(answer)
    except Exception:  # noqa: BLE001 - a malformed number is a wrong answer
        return 0.0
    if value is None or not cmath.isfinite(value):
        return 0.0
    return float(dataset.score_answer(answer, entry))


_INTERVALS = {
    "date": re.compile(r"\d+(?:\s*days?)?", re.I),
    "datetime": re.compile(r"\d+ days?, \d{1,2}:\d{2}(?::\d{2})?", re.I),
    "datetime_tz": re.compile(r"\d+ days?, \d{1,2}:\d{2}(?::\d{2})?", re.I),
}
_CLOCK = re.compile(r"\d{1,3}:\d{2}(?::\d{2}(?:\.\d{1,3})?)?")


def _time_interval(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream score, only when the whole answer is one duration in the task's format
    (upstream reads the first number of a "D days" answer, so "10 days/00:00:10" passed)."""
    pattern = _INTERVALS.get(entry["metadata"]["task_type"], _CLOCK)
    if not pattern.fullmatch(answer.strip()):
        return 0.0
    return float(dataset.score_answer(answer.strip(), entry))


def _json_list(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream score, only when the whole answer is one JSON value (upstream's ``json.loads``
    already requires it; kept explicit so a hedge of two plans is a parse failure)."""
    try:
        json.loads(answer)
    except ValueError:
        return 0.0
    return float(dataset.score_answer(answer, entry))


def _roots(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream score, only when the answer is a comma-separated list of numbers (upstream
    skips items that are not numbers, so 'x = 1.5, or maybe 2' kept its 1.5)."""
    items = [item.strip() for item in answer.split(",")]
    if not all(re.fullmatch(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)", item) for item in items):
        return 0.0
    return float(dataset.score_answer(answer, entry))


def _conclusion(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """1 when the upstream scorer finds the answer a valid, non-trivial conclusion and it is
    logically equivalent to the generator's (its truth table over the task's variables)."""
    from reasoning_gym.logic.propositional_logic import Expression

    if dataset.score_answer(answer, entry) < 1.0:
        return 0.0
    try:
        mine, gold = Expression.from_string(answer), Expression.from_string(entry["metadata"]["example_answer"])
    except (ValueError, KeyError, AttributeError):
        return 0.0
    return float(dataset._is_valid_conclusion([gold], mine) and dataset._is_valid_conclusion([mine], gold))



def _same_value(answer: str, entry: dict[str, Any], _: Any) -> float:
    """1 when the answer is one number (thousands commas allowed) equal to the chosen option;
    upstream allowed 0.01, so a wrong last digit of a three-decimal option passed."""
    try:
        value = float(answer.strip().replace(",", ""))
    except ValueError:
        return 0.0
    gold = float(entry["metadata"]["solution"])
    return float(math.isfinite(value) and abs(value - gold) <= 1e-9 * max(1.0, abs(gold)))


def _sorted_numbers(answer: str, entry: dict[str, Any], dataset: Any) -> float:
    """The upstream check (a list, sorted the task's way), with every number equal to the
    gold's; upstream allowed each number to be off by 1."""
    if float(dataset.score_answer(answer, entry)) < 1.0:
        return 0.0
    try:
        found = [float(x) for x in json.loads(answer.replace("'", '"'))]
        gold = [float(x) for x in entry["metadata"]["sorted_numbers"]]
    except (ValueError, TypeError):
        return 0.0
    return float(len(found) == len(gold) and all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(found, gold)))


def _valid_solution_longer(value: float) -> bool:
    """A valid solution that is longer than the optimal one (upstream pays optimal / used moves);
    0.05 and below is format credit for moves that do not solve."""
    return value > 0.05


_EVAL = ("upstream hands the answer to Python's eval, which runs whatever the policy writes inside "
         "the verifier process; the eval branch only ever paid partial credit, so Temper keeps the "
         "exact comparison and never evaluates the answer")

_INTEGRATION = Override(
    "the answer is evaluated with sympy's parse_expr (eval): 'F or W' evaluates to F, and a term in "
    "another letter is a constant to it ('F + C/W(X)' passed); a wrong answer can keep simplify busy "
    "for minutes", _antiderivative, expression="symbols")
"""Both integration generators share their scorer's weaknesses, and so their override."""

OVERRIDES: dict[str, Override] = {
    "game_of_life_halting": Override(
        "score_answer compares bool(answer) == bool(gold): any non-empty answer scores 1", _exact),
    "coin_flip": Override(
        "partial credit for a matching prefix: 0 scores 1 against 0.375 (min of the two lengths)", _coin_flip),
    "gsm_symbolic": Override(
        "the first number anywhere in the answer is compared, so '12 or 7' passes when the gold is 12", _one_number),
    "puzzle24": Override(
        "only checks that four numbers in range are used, not the task's numbers (1*2*3*4 solves every "
        "task), and truncates the value with int()", _puzzle24, expression="numbers"),
    "countdown": Override(
        "the answer is evaluated with sympy's parse_expr (eval)", expression="numbers"),
    "simple_integration": _INTEGRATION,
    "intermediate_integration": _INTEGRATION,
    "polynomial_multiplication": Override(
        "the answer is evaluated with sympy's parse_expr (eval): 'P or W' evaluates to P", expression="symbols"),
    "complex_arithmetic": Override(
        "min(1.0, exp(-distance)) is 1.0 when the distance is nan, so 'nan' or 'nani' passed; close "
        "answers earn exp(-distance), not kept (the results are whole numbers)", _complex),
    "time_intervals": Override(
        "a 'D days' answer is read as its first number, so '10 days/00:00:10' passed; near misses earn "
        "1 - difference/maximum, not kept", _time_interval),
    "polynomial_equations": Override(
        "items that are not numbers are skipped and each root is scored by exp(-10 x distance); Temper "
        "requires a list of numbers only and passes it when every root is the gold's to its four "
        "decimals (score 0.9999; 0.0955 for 0.0954 is wrong)", _roots, pass_at=0.9999),
    "figlet_font": Override(
        "0.1 per letter in place, capped at 1: ten right letters of a longer word scored 1", same_word),
    "number_format": Override(
        "the chosen number may be off by 0.01, so a wrong last digit of a three-decimal option passed",
        _same_value),
    "number_sorting": Override(
        "each number may be off by 1, so a wrong number passed if the list stayed sorted", _sorted_numbers),
    "rush_hour": Override(
        "text that is not a move is ignored, a blocked move goes as far as it can and unknown pieces "
        "are skipped, so a wrong last move or moves after the exit still pass", _rush_hour, open_ended=True),
    "sokoban": Override(
        "every character that is not a move is ignored and moves into walls are no-ops, so a solution "
        "with other text around it passes", _sokoban, open_ended=True),
    "binary_matrix": Override(_EVAL, exact_text),
    "spiral_matrix": Override(_EVAL, exact_text),
    "string_insertion": Override(_EVAL, exact_text),
    "n_queens": Override(_EVAL + "; any valid completion of the board passes, so the gold is only an example",
                         _n_queens, open_ended=True),
    "letter_jumble": Override("words after the gold's are not read, so the gold followed by anything passed (20 of 40 "
                              "tasks); the partial credit per word in place is not kept", same_words),
    "kakurasu": Override("numbers after a row's last and text around the grid are skipped", strict_grid(upstream_score)),
    "survo": Override("text around the grid is skipped", strict_grid(upstream_score)),
    "graph_color": Override("any proper colouring passes, so the gold is only an example; 0.01 for parseable JSON "
                            "is not earned", open_ended=True),
    "tower_of_hanoi": Override(
        "a move is found by re.search in its line, so 'Move disk 1 from Peg 1 to Peg 3 or ...' reads as "
        "its first move; Temper requires every line to be exactly one move. A valid but longer solution "
        "earns optimal/used moves (kept, so the gold's line count is not a limit); 0.05 for valid moves "
        "that do not solve is not earned", _hanoi, open_ended=True, earned=_valid_solution_longer),
    "knight_swap": Override(
        "a valid but longer solution earns optimal/used moves (kept, so the gold's length is not a limit; "
        "the answer must be one JSON list or No); 0.05 for valid moves that do not solve is not earned",
        open_ended=True, earned=_valid_solution_longer),
    "shortest_path": Override(
        "a valid path longer than the shortest earns 0.5 (kept)", earned=lambda v: v == 0.5),
    "quantum_lock": Override(
        "every letter A-C anywhere in the answer is read as a button press, words included; Temper "
        "requires the answer to be only a button sequence. Any shortest sequence passes, so the gold "
        "is only an example; a longer sequence that reaches the target earns 0.5 upstream, not kept "
        "(the prompt asks for the shortest, and a wrong guess followed by the gold earned it)",
        _quantum_lock, open_ended=True),
    "fraction_simplification": Override(
        "a fraction at the start of the answer is read and the rest ignored ('a/b/c/d' passes for a/b); "
        "wrong fractions earn 0.01-0.1 format credit", _fraction),
    "word_ladder": Override(
        "any valid ladder passes, so the gold is only an example (its separators are not counted); "
        "ladders through words outside the vocabulary earn 0.5 per word, not kept", open_ended=True),
    "boxnet": Override(
        "any plan that delivers every box passes, so the gold is only an example", _json_list, open_ended=True),
    "jugs": Override(
        "any move list that reaches the target passes, so the gold is only an example", _json_list, open_ended=True),
    "propositional_logic": Override(
        "any valid conclusion passes, so a weak one fixed in advance passed most tasks ((Q → P) 67%, "
        "against 24% for another task's conclusion); Temper passes only a conclusion logically equivalent "
        "to the generator's; a trivial conclusion earns 0.25, not kept; items with contradictory premises "
        "are not drawn", _conclusion),
}
"""Generators whose upstream scorer Temper does not take as it is, with the reason."""


def override_for(name: str) -> Override | None:
    return OVERRIDES.get(name)


def scorer_for(name: str) -> Scorer:
    override = OVERRIDES.get(name)
    return override.score if override is not None and override.score is not None else upstream_score


def judge(answer: str, entry: dict[str, Any], name: str, level: int, gold: str) -> Verification:
    """Temper's verdict on an extracted ``answer`` for ``entry``: the guards, then the generator's
    scorer (or its override), then the reward mapping."""
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
