"""Calculator plus key-value store: read hidden inputs, compute, store results, submit.

Tools (one JSON object per turn): ``get`` {key}, ``set`` {key, value}, ``keys``, ``calc``
{expression} (arithmetic only), ``submit``. Reward comes from the final store: every target key
must hold its expected number (within 0.01); partial credit for some. Only finite numbers are
stored or computed: ``NaN`` and infinities are refused (``abs(nan - v) > tol`` is False, so a
"too far?" test would let NaN through; the check here asks "within?").

>>> from trainer.tasks.base import Task
>>> env = CalculatorKVEnv()
>>> task = Task("tool-calculator-kv", "1", "...", meta={"initial_store": {"a": 2, "b": 3}, "targets": {"total": 6}})
>>> _ = env.reset(task)
>>> env.step('{"tool": "get", "key": "a"}').observation
'a = 2'
>>> env.step('{"tool": "calc", "expression": "2 * 3"}').observation
'6'
>>> env.step('{"tool": "set", "key": "total", "value": 6}').observation
'ok: total = 6'
>>> r = env.step('{"tool": "submit"}'); r.done, r.outcome.outcome.value
(True, 'pass')
>>> _ = env.reset(task)
>>> env.step('{"tool": "set", "key": "total", "value": NaN}').observation
'error: value must be a finite number'
>>> env.step('{"tool": "set", "key": "total", "value": "1e308 * 10 - 1e308 * 10"}').observation
'error: cannot evaluate: the result is not a finite number'
"""
from __future__ import annotations

import ast
import operator
from typing import Any

from trainer.environments.base import ActionError, ToolEnvironment
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.normalize import is_finite_number

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv}
TOLERANCE = 0.01
CENT_HALF = 0.005 + 1e-9
"""Half a cent (and float noise): how far a value asked for to the cent may be from the exact one."""


MAX_BITS = 4096
"""The largest integer an expression may make, in bits (a power tower would take hours)."""


def safe_eval(expression: str) -> float:
    """Evaluate ``+ - * / // % **`` and parentheses over real numbers; anything else is an error,
    and so is a complex or a huge intermediate value.

    >>> safe_eval("(2 + 3) * 4 / 5")
    4.0
    >>> [_error(e) for e in ("(-1)**0.5 // 1", "(((9**64)**64)**64)**64", "(2**64)**64 * 2**64")]
    ['not a real number', 'a number too large', 'a number too large']
    """
    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow):
                if abs(right) > 64:
                    raise ActionError("exponent too large")
                if isinstance(left, int) and abs(left).bit_length() * abs(right) > MAX_BITS:
                    raise ActionError("a number too large")
            return _checked(_OPS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
        raise ActionError(f"unsupported expression element {type(node).__name__}")

    if len(expression) > 500:
        raise ActionError("expression too long")
    try:
        value = ev(ast.parse(expression, mode="eval"))
    except (SyntaxError, ZeroDivisionError, OverflowError, TypeError, ValueError, RecursionError) as exc:
        if isinstance(exc, ActionError):
            raise
        raise ActionError(f"cannot evaluate: {exc}") from None
    if not is_finite_number(value):
        raise ActionError("cannot evaluate: the result is not a finite number")
    return value


def _checked(value: Any) -> Any:
    """An intermediate value of :func:`safe_eval`: real, and an integer of at most ``MAX_BITS``."""
    if isinstance(value, complex):
        raise ActionError("not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ActionError("a number too large")
    return value


def _error(expression: str) -> str:
    try:
        safe_eval(expression)
    except ActionError as exc:
        return str(exc)
    return ""


def within(found: Any, expected: float, tolerance: float = TOLERANCE) -> bool:
    """True when ``found`` is a finite number within ``tolerance`` of ``expected``.

    >>> within(6, 6.004), within(float("nan"), 6), within(float("inf"), float("inf")), within("6", 6)
    (True, False, False, False)
    """
    if not (is_finite_number(found) and is_finite_number(expected)):
        return False
    try:
        return abs(float(found) - float(expected)) <= tolerance
    except OverflowError:
        return False


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(round(value, 6)) if isinstance(value, float) else str(value)


class CalculatorKVEnv(ToolEnvironment):
    """One episode's store and step budget."""

    name = "calculator_kv"
    store: dict[str, Any]

    def _start(self, task: Task) -> None:
        self.store = dict(task.meta["initial_store"])

    def _tool(self, call: dict[str, Any]) -> str:
        tool = call["tool"]
        if tool == "get":
            key = str(call.get("key"))
            if key not in self.store:
                raise ActionError(f"no key {key!r}")
            return f"{key} = {_fmt(self.store[key])}"
        if tool == "set":
            key, value = str(call.get("key")), call.get("value")
            if isinstance(value, str):
                value = safe_eval(value)
            if not is_finite_number(value):
                raise ActionError("value must be a finite number")
            self.store[key] = value
            return f"ok: {key} = {_fmt(value)}"
        if tool == "keys":
            return ", ".join(sorted(self.store))
        if tool == "calc":
            return _fmt(safe_eval(str(call.get("expression", ""))))
        raise ActionError(f"unknown tool {tool!r}; tools: get, set, keys, calc, submit")

    def evaluate(self) -> Verification:
        """Reward from the store: the fraction of target keys holding their expected value.

        A task that knows its targets before rounding (``meta["exact_targets"]``, asked for to
        the cent) takes a value within half a cent of the exact one: either rounding of a tie,
        never a cent off. Otherwise a value within ``TOLERANCE`` of the target passes."""
        assert self.task is not None
        targets: dict[str, float] = self.task.meta["targets"]
        exact: dict[str, float] = self.task.meta.get("exact_targets") or {}

        def right(key: str, target: float) -> bool:
            if key in exact:
                return within(self.store.get(key), exact[key], CENT_HALF)
            return within(self.store.get(key), target)

        wrong = [k for k, v in targets.items() if not right(k, v)]
        details = {"expected": targets, "found": {k: self.store.get(k) for k in targets}, "wrong": wrong, "steps": self.steps}
        if not wrong:
            return Verification.passed(**details)
        score = 1 - len(wrong) / len(targets)
        return Verification(Outcome.PARTIAL, score, details) if score > 0 else Verification.failed(**details)
