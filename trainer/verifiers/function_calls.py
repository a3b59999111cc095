"""Stage ``function_calls``: function calls checked by their syntax tree against possible answers.

The answer format and the rules are the Berkeley Function Calling Leaderboard's (BFCL, the
``bfcl-eval`` package's data), checked by this module's own code: the completion is one Python
list of calls, ``[name(param=value, ...), ...]`` (or one call, in one fenced block at most); values
are literals (strings, numbers, booleans, None, lists, tuples, dicts), keyword arguments only.
Each call is compared with the task's possible answers (``task.answer``: ``[{name: {param:
[allowed values]}}]``, where ``""`` among the allowed values marks an optional parameter) and the
function docs (``task.meta["functions"]``: each parameter's type):

* ``simple``: exactly one call, to the expected function; ``multiple``: exactly one call, to the
  right one of several offered; ``parallel`` (and ``parallel_multiple``): as many calls as
  expected, in any order, each expected call paired with a distinct call that fits it;
* a parameter must be one the function declares and the answer names, every required one present,
  every one the answer does not mark optional present; its value of the declared type exactly
  (``True`` is not an integer; an integer is accepted for a float), or of the answer's own type
  where the answer holds a variable's name; strings compared after removing spaces and ``,./-_*^``,
  lower-cased, ``'`` read as ``"``; lists element by element, dicts key by key;
* ``irrelevance``: no offered function fits: any call of one fails (a list of calls, or a call
  anywhere in the text, whatever stands between the name and its parenthesis); ``relevance``: a
  call is needed: checked against the possible answers where the task has them, else against
  the functions' docs (declared parameters, every required one, the declared types).

Never a match: a number that is not finite, positional arguments, an expression that is not a
literal, two fenced blocks or two lists (one final answer), more than :data:`MAX_CHARS` characters.

>>> from trainer.tasks.base import Task
>>> fn = {"name": "area", "parameters": {"type": "dict", "properties": {"base": {"type": "integer"},
...       "unit": {"type": "string"}}, "required": ["base"]}}
>>> task = Task("bfcl", "1", "...", answer=[{"area": {"base": [10], "unit": ["cm", ""]}}],
...             meta={"functions": [fn], "category": "simple"})
>>> function_calls("[area(base=10)]", task).outcome.value, function_calls("[area(base=10, unit='CM')]", task).outcome.value
('pass', 'pass')
>>> function_calls("[area(base=True)]", task).details["error"]
'base: expected integer, got bool (True)'
>>> function_calls("[area(base=10), area(base=11)]", task).outcome.value
'fail'
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

MAX_CHARS = 20_000
"""A longer completion is no answer (the longest reference here is about 2,000 characters)."""
CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance", "relevance")
TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                          "tuple": list, "dict": dict, "any": str}
"""Declared parameter type -> the Python type its value must have (BFCL's mapping)."""
_FENCE = re.compile(r"```[a-zA-Z]*\n(.*?)```", re.S)
_STANDARD = re.compile(r"[ ,./\-_*^]")


class CallError(ValueError):
    """The completion holds no well-formed list of calls; the message says why."""


def _name(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):  # iteratively: a chain of 1,200 dots is no stack overflow
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise CallError("a call's function must be a (dotted) name")
    return ".".join([node.id, *reversed(parts)])


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, complex):
        return False
    if isinstance(value, (list, tuple, set)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(k) and _finite(v) for k, v in value.items())
    return True


def parse_calls(completion: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls of a completion, in order: ``[(name, {param: value})]``; CallError otherwise.

    >>> parse_calls("```python\\n[f.g(a=1, b=[1, 'x']), h()]\\n```")
    [('f.g', {'a': 1, 'b': [1, 'x']}), ('h', {})]
    """
    if len(completion) > MAX_CHARS:
        raise CallError(f"the completion has {len(completion)} characters; at most {MAX_CHARS}")
    blocks = _FENCE.findall(completion)
    if len(blocks) > 1:
        raise CallError(f"{len(blocks)} fenced blocks: one list of calls per completion")
    text = (blocks[0] if blocks else completion).strip()
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CallError("not a Python list of calls such as [name(param=value)]") from None
    items = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    calls = []
    for item in items:
        if not isinstance(item, ast.Call):
            raise CallError("every item of the list must be a call")
        if item.args:
            raise CallError(f"{_name(item.func)}: positional arguments; name every parameter")
        params: dict[str, Any] = {}
        for keyword in item.keywords:
            if keyword.arg is None:
                raise CallError(f"{_name(item.func)}: ** arguments are not values")
            if keyword.arg in params:
                raise CallError(f"{_name(item.func)}: {keyword.arg} given twice")
            try:
                value = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                raise CallError(f"{_name(item.func)}: {keyword.arg} is not a literal value") from None
            if not _finite(value):
                raise CallError(f"{_name(item.func)}: {keyword.arg} holds a number that is not finite")
            params[keyword.arg] = value
        calls.append((_name(item.func), params))
    return calls


def standardize(text: str) -> str:
    """BFCL's string normal form: no spaces or ``,./-_*^``, lower case, ``'`` as ``"``."""
    return _STANDARD.sub("", text).lower().replace("'", '"')


def _norm(value: Any) -> Any:
    return standardize(value) if isinstance(value, str) else value


def _answer_type(allowed: list) -> type | None:
    return next((type(a) for a in allowed if a != ""), None)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _dict_ok(value: dict, allowed: list) -> bool:
    for option in allowed:
        if option == "" or not isinstance(option, dict):
            continue
        if all(k in option and _norm(v) in [_norm(a) for a in option[k]] for k, v in value.items()) and \
                all(k in value or "" in option[k] for k in option):
            return True
    return False


def _value_error(param: str, value: Any, spec: dict, allowed: list) -> str | None:
    """Why ``value`` is not an allowed value of ``param`` (None when it is)."""
    declared = spec.get("type", "any")
    expected = TYPES.get(declared, str)
    if declared == "tuple" and type(value) is tuple:
        value = list(value)
    if declared == "float" and type(value) is int:
        value = float(value)
    inner = TYPES.get((spec.get("items") or {}).get("type", ""), None) if declared in ("array", "tuple") else None
    answer_type = _answer_type(allowed)
    variable = answer_type is not None and answer_type is not expected
    if type(value) is not expected:
        if not (answer_type is not None and type(value) is answer_type):
            return f"{param}: expected {declared}, got {type(value).__name__} ({_show(value)})"
        variable = True
    elif inner is not None and not any(isinstance(option, list) and all(
            type(v) is inner or type(v) is _answer_type(option) for v in value) for option in allowed):
        # each item of the declared inner type, or of the type the answer's items have (a variable's name)
        return f"{param}: expected a list of {spec['items']['type']} ({_show(value)})"
    if not variable:
        if expected is dict:
            return None if _dict_ok(value, allowed) else f"{param}: {_show(value)} is not an allowed value"
        if expected is list and inner is dict:
            for option in allowed:
                if isinstance(option, list) and len(option) == len(value) and \
                        all(isinstance(v, dict) and _dict_ok(v, [o]) for v, o in zip(value, option)):
                    return None
            return f"{param}: {_show(value)} is not an allowed value"
        if expected is str:
            ok = standardize(value) in [standardize(a) for a in allowed if isinstance(a, str)]
            return None if ok else f"{param}: {_show(value)} is not an allowed value"
        if expected is list:
            ok = [_norm(v) for v in value] in [[_norm(a) for a in option] for option in allowed if isinstance(option, list)]
            return None if ok else f"{param}: {_show(value)} is not an allowed value"
    return None if value in allowed else f"{param}: {_show(value)} is not an allowed value"


def _missing_required(name: str, params: dict[str, Any], function: dict) -> str | None:
    """Why the call ``name(**params)`` lacks a parameter its function declares required (None when
    it has them all)."""
    for required in (function.get("parameters") or {}).get("required") or []:
        if required not in params:
            return f"{name}: missing required parameter {required}"
    return None


def check_call(call: tuple[str, dict[str, Any]], function: dict, expected: dict[str, dict[str, list]]) -> str | None:
    """Why one call does not match one expected call (None when it does)."""
    name, params = call
    (expected_name, allowed), = expected.items()
    if name != expected_name:
        return f"called {name}, expected {expected_name}"
    properties = (function.get("parameters") or {}).get("properties") or {}
    if (why := _missing_required(name, params, function)) is not None:
        return why
    for param, value in params.items():
        if param not in properties or param not in allowed:
            return f"{name}: unexpected parameter {param}"
        if (why := _value_error(param, value, properties[param], allowed[param])) is not None:
            return why
    for param, values in allowed.items():
        if param not in params and "" not in values:
            return f"{name}: missing parameter {param}"
    return None


def called_anywhere(text: str, names: list[str]) -> str | None:
    """The first offered function the text calls anywhere: a list of calls, or a call in prose
    with whitespace, comments or line continuations before its parenthesis."""
    try:
        calls = parse_calls(text)
    except CallError:
        calls = []
    for name, _ in calls:
        if name in names:
            return name
    gap = r"(?:\s|\\\n|#[^\n]*\n|\)|\])*"  # what may stand between a name and its "(" ("(name)(", "name  #\n(")
    for name in names:
        if re.search(rf"(?<![\w.]){re.escape(name)}{gap}\(", text):
            return name
    return None


def schema_error(call: tuple[str, dict[str, Any]], functions: list[dict]) -> str | None:
    """Why a call does not fit its function's docs (None when it does): an offered function,
    declared parameters only, every required one, each value of its declared type."""
    name, params = call
    function = next((f for f in functions if f.get("name") == name), None)
    if function is None:
        return f"{name} is not an offered function"
    properties = (function.get("parameters") or {}).get("properties") or {}
    if (why := _missing_required(name, params, function)) is not None:
        return why
    for param, value in params.items():
        if param not in properties:
            return f"{name}: unexpected parameter {param}"
        expected = TYPES.get(properties[param].get("type", "any"), str)
        if type(value) is not expected and not (expected is float and type(value) is int) \
                and not (expected is list and type(value) is tuple):
            return f"{param}: expected {properties[param].get('type')}, got {type(value).__name__}"
    return None


def _function(functions: list[dict], name: str) -> dict:
    return next((f for f in functions if f.get("name") == name), {"name": name, "parameters": {}})


def function_calls(completion: str, task: Task, *, category: str | None = None) -> Verification:
    """Check the completion's calls against the task's possible answers (see the module docstring)."""
    category = category or task.meta.get("category", "simple")
    if category not in CATEGORIES:
        raise ValueError(f"unknown function-call category {category!r}; known: {', '.join(CATEGORIES)}")
    functions: list[dict] = task.meta["functions"]
    if category == "irrelevance":
        if (named := called_anywhere(completion, [f["name"] for f in functions])) is not None:
            return Verification.failed(error=f"no offered function fits this request, but the answer calls {named}")
        return Verification.passed(found="no call")
    try:
        calls = parse_calls(completion)
    except CallError as exc:
        return Verification.failed(Outcome.PARSE_ERROR, error=str(exc))
    found = [f"{name}({', '.join(f'{k}={_show(v)}' for k, v in params.items())})" for name, params in calls][:10]
    if category == "relevance":  # a call is needed: checked against the answers where the task has them, else the docs
        if not calls:
            return Verification.failed(error="a call of an offered function was expected", found=found)
        if task.answer:
            category = "parallel" if len(task.answer) > 1 else "simple"
        else:
            for call in calls:
                if (why := schema_error(call, functions)) is not None:
                    return Verification.failed(error=why, found=found)
            return Verification.passed(found=found)
    expected: list[dict] = task.answer
    if len(calls) != len(expected):
        return Verification.failed(error=f"{len(calls)} call{'s' if len(calls) != 1 else ''} for {len(expected)} expected",
                                   found=found, expected=expected)
    if category in ("simple", "multiple"):
        why = check_call(calls[0], _function(functions, next(iter(expected[0]))), expected[0])
        return Verification.failed(error=why, found=found) if why else Verification.passed(found=found)
    fits = [[check_call(call, _function(functions, next(iter(want))), want) is None for call in calls] for want in expected]
    if (missing := unmatched(fits)) is not None:
        return Verification.failed(error=f"no call matches the expected {next(iter(expected[missing]))} call", found=found)
    return Verification.passed(found=found)


def unmatched(fits: list[list[bool]]) -> int | None:
    """The first expected call left without a call of its own when every expected call is paired
    with a distinct call that fits it (a maximum matching, by augmenting paths), or None when
    all are paired. Any order of correct calls passes (BFCL pairs greedily, first come first
    served, and fails some orders whose calls each fit more than one expected call).

    >>> unmatched([[True, True], [True, False]]), unmatched([[True, False], [True, False]])
    (None, 1)
    """
    owner: dict[int, int] = {}

    def place(want: int, seen: set[int]) -> bool:
        for call, ok in enumerate(fits[want]):
            if ok and call not in seen:
                seen.add(call)
                if call not in owner or place(owner[call], seen):
                    owner[call] = want
                    return True
        return False

    for want in range(len(fits)):
        if not place(want, set()):
            return want
    return None


def _first(value: Any) -> Any:
    """An allowed value as a literal: a dict's keys take their first allowed value (optional keys
    left out), a list of such dicts likewise."""
    if isinstance(value, dict):
        return {k: _first(v[0]) for k, v in value.items() if isinstance(v, list) and v and v[0] != ""}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_first(v) for v in value]
    return value


def reference_calls(answer: list[dict], functions: list[dict] | None = None) -> str:
    """A completion that makes the expected calls with the first allowed value of each parameter
    (optional parameters left out where their first allowed value is "" or ``functions`` does not
    declare them).

    >>> reference_calls([{"area": {"base": [10], "unit": ["", "cm"]}}, {"f.g": {"x": ["a"]}}])
    "[area(base=10), f.g(x='a')]"
    """
    calls = []
    for call in answer:
        (name, params), = call.items()
        declared = None
        if functions is not None:
            declared = ((_function(functions, name).get("parameters") or {}).get("properties") or {})
        args = [f"{param}={_first(values[0])!r}" for param, values in params.items()
                if values and values[0] != "" and not (declared is not None and param not in declared and "" in values)]
        calls.append(f"{name}({', '.join(args)})")
    return "[" + ", ".join(calls) + "]"
