"""BFCL's multi-turn stateful API simulators as an environment (``bfcl-multi-*``).

An episode is one of the Berkeley Function Calling Leaderboard's multi-turn conversations: a
user asks for several things in turn, over a file system, a trading bot, travel booking, vehicle
control, messaging, posting and ticket APIs (the ``bfcl-eval`` package's simulator classes, loaded
with the entry's initial state). Each model turn is either calls, a Python list such as
``[cd(folder='document'), mkdir(dir_name='temp')]`` (or ``{"tool": "calls", "calls": "[...]"}``),
whose results come back as the observation, or a reply without calls (``{"tool": "reply", ...}``
or plain text), which ends the model's part of the user's turn: the next user message follows.

Calls run on this episode's own simulator instances, here, in trusted code: parsed from the text
by its syntax tree (literal arguments only, positional or by name), dispatched to a public method
of an involved class that the entry offers (functions the entry excludes, or withholds until a
later turn, are refused), never evaluated as code. Entries that involve the math API are not
drawn: its ``power``, ``logarithm`` and ``square_root`` take unbounded time on numbers the policy
picks.

The verdict follows BFCL's multi-turn rules, checked at the end of each user turn: where the
reference makes calls, the simulators' public state must equal the state the reference calls
leave (run on instances of their own), every result the reference calls returned in that turn
must be among the results of the model's calls so far, and a turn without any call fails; where
the reference makes none (a function or a parameter is missing: the model should ask), any call
fails. A simulator whose state grows past :data:`MAX_STATE_NODES` values counted along every
path ends the episode as a failure. All turns pass: ``pass``.

>>> from trainer.tasks.base import Task
>>> env = BfclMultiEnv(); first = env.reset(Task("bfcl-multi-base", "multi_turn_base_0", "...", meta={
...     "environment": "bfcl_multi", "category": "base", "bfcl_id": "multi_turn_base_0"}))
>>> env.step("[cd(folder='document'), mkdir(dir_name='temp'), mv(source='final_report.pdf', destination='temp')]").done
False
>>> env.step("Done: the report is in document/temp.").observation[:40]
'User: Perform a detailed search using gr'
"""
from __future__ import annotations

import ast
import copy
import decimal
import importlib
import inspect
import json
from typing import Any

from trainer.environments.base import ActionError, StepResult, parse_action
from trainer.outcomes import Verification
from trainer.tasks.base import Task
from trainer.tasks.bfcl_data import docs_for, entry_of

MAX_CALLS_PER_TURN = 50
MAX_STEPS = 60
MAX_INT = 10_000_000
MAX_RESULT_CHARS = 2_000
MAX_STATE_NODES = 200_000
"""A simulator's state may hold this many values counted along every path (the long-context
entries hold about 30,000)."""
BACKEND = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES = {"GorillaFileSystem": "gorilla_file_system", "MessageAPI": "message_api", "TwitterAPI": "posting_api",
                 "TicketAPI": "ticket_api", "TradingBot": "trading_bot", "TravelAPI": "travel_booking",
                 "VehicleControlAPI": "vehicle_control", "MathAPI": "math_api"}
"""The simulator classes of the multi-turn categories and their modules."""
UNBOUNDED = {"MathAPI"}
"""Classes whose methods can take unbounded time on the policy's numbers: their entries are not drawn."""


class CallError(ValueError):
    """A model turn's calls are not literal calls of offered functions."""


class StateTooLarge(RuntimeError):
    """A simulator's state grew past :data:`MAX_STATE_NODES` (counted along every path)."""


def expanded_size(value: Any, limit: int = 10_000_000) -> int:
    """How many values a state holds counted along every path to them (a dict shared by two
    directories counts twice; ``parent`` links are not followed), computed once per distinct object:
    BFCL's file system shares directories on ``cp`` and ``mv``, so a few hundred calls can make
    2^40 paths that ``find`` and ``du`` then walk."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(v: Any) -> int:
        if isinstance(v, (str, bytes, int, float, bool)) or v is None:
            return 1
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in active:  # a cycle: walking it ends in the simulators' recursion limit, an error, not a hang
            return 0
        active.add(key)
        if isinstance(v, dict):
            children = list(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            children = list(v)
        elif hasattr(v, "__dict__"):
            children = [x for k, x in vars(v).items() if not k.startswith("__") and k != "parent"]  # no walking back up
        else:
            children = []
        total = 1
        for child in children:
            total = min(total + size(child), limit)
        active.discard(key)
        sizes[key] = total
        return total

    return size(value)


def _literal(node: ast.AST) -> Any:
    value = ast.literal_eval(node)

    def check(v: Any) -> None:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return
        if isinstance(v, int):
            if abs(v) > MAX_INT:
                raise CallError(f"the number {str(v)[:20]} is beyond {MAX_INT}")
            return
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                raise CallError("a number is not finite")
            return
        if isinstance(v, (list, tuple, set)):
            for x in v:
                check(x)
            return
        if isinstance(v, dict):
            for k, x in v.items():
                check(k)
                check(x)
            return
        raise CallError(f"a {type(v).__name__} is not a value here")

    check(value)
    return value


def parse_turn_calls(text: str, cap: int | None = MAX_CALLS_PER_TURN) -> list[tuple[str, list, dict]]:
    """``[(name, args, kwargs)]`` of a Python list of calls (or one call); CallError otherwise.

    >>> parse_turn_calls("[sort('a.txt'), cd(folder='..')]")
    [('sort', ['a.txt'], {}), ('cd', [], {'folder': '..'})]
    """
    if len(text) > 20_000:
        raise CallError("more than 20,000 characters of calls")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CallError("not a Python list of calls") from None
    items = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    out = []
    for item in items:
        if not isinstance(item, ast.Call) or not isinstance(item.func, ast.Name):
            raise CallError("every item must be a call of a function by its name")
        try:
            args = [_literal(a) for a in item.args]
            kwargs = {k.arg: _literal(k.value) for k in item.keywords if k.arg is not None}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
            raise CallError(f"{item.func.id}: arguments must be literal values ({exc})"[:200]) from None
        if any(k.arg is None for k in item.keywords):
            raise CallError(f"{item.func.id}: ** arguments are not values")
        out.append((item.func.id, args, kwargs))
    if cap is not None and len(out) > cap:
        raise CallError(f"{len(out)} calls in one turn; at most {cap}")
    return out


def _result_text(value: Any) -> str:
    """A call's result as BFCL records it: a string as is, a dict as JSON, anything else by str()."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class Simulators:
    """One set of the entry's simulator instances, and the functions it offers now."""

    def __init__(self, entry: dict[str, Any], long_context: bool) -> None:
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        for name in entry["involved_classes"]:
            module = importlib.import_module(f"{BACKEND}.{CLASS_MODULES[name]}")  # lazy: the entry names the class
            instance = getattr(module, name)()
            if name != "MathAPI":  # stateless
                instance._load_scenario(copy.deepcopy(entry["initial_config"].get(name, {})), long_context=long_context)
                # the long-context loaders insert module-level dicts themselves: this episode gets its own copies
                instance.__dict__.update(copy.deepcopy({k: v for k, v in vars(instance).items() if not k.startswith("__")}))
            self.instances[name] = instance
            for method, bound in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method.startswith("_"):
                    self.methods[method] = bound

    def run(self, calls: list[tuple[str, list, dict]], allowed: set[str]) -> list[str]:
        """Each call's result; StateTooLarge when a call left a simulator's state past the bound."""
        results = []
        for name, args, kwargs in calls:
            if name not in self.methods or name not in allowed:
                results.append(f"Error during execution: no function {name} is available")
                continue
            try:
                # BFCL's MathAPI sets the thread's decimal precision (square_root's ``precision``):
                # a call's context changes stay in the call, never in the trainer's process.
                with decimal.localcontext():
                    results.append(_result_text(self.methods[name](*args, **kwargs)))
            except Exception as exc:  # noqa: BLE001 - what a call does wrong is its result, as in BFCL
                results.append(f"Error during execution: {str(exc)[:300]}")
            for cls, instance in self.instances.items():
                if expanded_size(vars(instance)) > MAX_STATE_NODES:
                    raise StateTooLarge(f"after {name}, the {cls} state holds more than {MAX_STATE_NODES:,} values "
                                        "counted along every path (a directory copied into itself, shared again and again)")
        return results

    def state(self) -> dict[str, dict[str, Any]]:
        return {name: {k: v for k, v in vars(inst).items() if not k.startswith("_")} for name, inst in self.instances.items()}


class BfclMultiEnv:
    """One conversation: the model's and the reference's simulators, the turn, the results."""

    name = "bfcl_multi"

    def reset(self, task: Task) -> str:
        self.task = task
        self.entry, self.truth = entry_of(task.meta["category"], task.meta["bfcl_id"])
        long_context = task.meta["category"] == "long_context"
        self.model = Simulators(self.entry, long_context)
        self.reference = Simulators(self.entry, long_context)
        self.turn, self.steps, self.done = 0, 0, False
        self.results: list[str] = []
        self.turn_calls = 0
        self.outcome: Verification | None = None
        return task.prompt

    def allowed(self, turn: int) -> set[str]:
        """The functions offered at ``turn``: not excluded, and not withheld until a later turn."""
        withheld = {f for t, names in (self.entry.get("missed_function") or {}).items() if int(t) > turn for f in names}
        return set(self.model.methods) - set(self.entry.get("excluded_function") or []) - withheld

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult("", True, self.outcome)
        self.steps += 1
        calls = None
        try:
            call = parse_action(action)
            if call.get("tool") == "calls":
                calls = parse_turn_calls(str(call.get("calls", "")))
        except ActionError:
            try:
                calls = parse_turn_calls(action)
            except CallError:
                calls = None  # a reply: the model's part of this user turn is over
        except CallError as exc:
            return self._budget(f"error: {exc}")
        if calls:
            try:
                results = self.model.run(calls, self.allowed(self.turn))
            except StateTooLarge as exc:
                self.done = True
                self.outcome = Verification.failed(error=str(exc), turn=self.turn, steps=self.steps)
                return StepResult(str(exc), True, self.outcome)
            self.results += results
            self.turn_calls += len(calls)
            return self._budget("\n".join(f"{name}: {r[:MAX_RESULT_CHARS]}" for (name, _, _), r in zip(calls, results)))
        return self._end_turn()

    def _budget(self, observation: str) -> StepResult:
        if self.steps >= MAX_STEPS:
            self.done = True
            self.outcome = Verification.failed(error="step budget used up", turn=self.turn)
            return StepResult(observation + "\nstep budget used up", True, self.outcome)
        return StepResult(observation, False)

    def _end_turn(self) -> StepResult:
        expected = self.truth[self.turn]
        if not expected and self.turn_calls:  # BFCL's irrelevance rule: nothing was to be done (a function or a value missing)
            self.done = True
            self.outcome = Verification.failed(error="calls made in a turn where the request could not be done as asked "
                                                     "(a function or a parameter was missing: ask instead)",
                                               turn=self.turn, steps=self.steps)
            return StepResult(f"turn {self.turn} failed", True, self.outcome)
        if expected:
            reference_calls = parse_turn_calls("[" + ", ".join(expected) + "]", cap=None)
            reference_results = self.reference.run(reference_calls, set(self.reference.methods))
            why = None
            if not self.turn_calls:
                why = "no call in a turn that needed calls"
            elif (diff := _state_difference(self.model.state(), self.reference.state())) is not None:
                why = f"the state differs from the reference's: {diff}"
            elif (missing := _missing(reference_results, self.results)):
                why = f"a result the reference calls returned is missing: {missing[0][:200]}"
            if why is not None:
                self.done = True
                self.outcome = Verification.failed(error=why, turn=self.turn, steps=self.steps)
                return StepResult(f"turn {self.turn} failed", True, self.outcome)
        self.turn += 1
        self.turn_calls = 0
        if self.turn >= len(self.truth):
            self.done = True
            self.outcome = Verification.passed(turns=self.turn, steps=self.steps)
            return StepResult("all requests done", True, self.outcome)
        return StepResult(self.next_message(), False)

    def next_message(self) -> str:
        messages = self.entry["question"][self.turn]
        text = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)
        revealed = (self.entry.get("missed_function") or {}).get(str(self.turn)) or []
        if revealed:
            text += ("\n" if text else "") + "These functions are now available: " + json.dumps(
                docs_for(self.entry, names=revealed))
        return text or "(no message)"

    def evaluate(self) -> Verification:
        return self.outcome or Verification.failed(error="the conversation did not end", turn=self.turn)


def _state_difference(model: dict, reference: dict) -> str | None:
    for cls, attrs in reference.items():
        for key, value in attrs.items():
            if model.get(cls, {}).get(key) != value:
                return f"{cls}.{key}"
    return None


def _missing(needed: list[str], have: list[str]) -> list[str]:
    pool = list(have)
    out = []
    for item in needed:
        if item in pool:
            pool.remove(item)
        else:
            out.append(item)
    return out
