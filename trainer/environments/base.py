"""The multi-turn Environment interface: what the trainer's episode runner drives.

``reset(task) -> observation``; ``step(action) -> StepResult(observation, done, outcome, shown)``. An
environment keeps its state across the turns of one episode; the tokens of its observations are
appended to the trajectory with loss mask 0 (:func:`trainer.episodes.multi_turn`).
:class:`StepResult` is a NamedTuple read as ``.observation``/``.done``/``.outcome``/``.shown``.

:class:`ToolEnvironment` is the turn loop of the tool-use environments; their ``evaluate()``
scores the current state (reward from the final state), which is what a replay of a whole
transcript uses when it ends without ``submit``.
"""
from __future__ import annotations

import json
import re
from typing import Any, NamedTuple, Protocol

from trainer.outcomes import Verification
from trainer.verifiers.answers import tag_spans
from trainer.tasks.base import Task


class StepResult(NamedTuple):
    """What the environment says after one model turn."""

    observation: str
    """Text shown to the model next (tool output, error or feedback); masked out of the loss."""
    done: bool
    """True once the episode is over."""
    outcome: Verification | None = None
    """The episode's verification once done."""
    shown: dict[str, str] | None = None
    """What the trajectory explorer shows of the turn beside its observation, as strings (the
    shell's ``command`` and how it ended, ``exit``); recorded in the transcript, never trained on."""


class Environment(Protocol):
    """State kept across the turns of one episode."""

    def reset(self, task: Task) -> str:
        """Start an episode; returns the first observation (the prompt text)."""
        ...

    def step(self, action: str) -> StepResult:
        """Take the model's turn text; return the next observation."""
        ...


class ActionError(ValueError):
    """The model's turn is not a valid tool call; the message is shown to it."""


class ToolEnvironment:
    """The turn loop shared by the tool-use environments: parse the call, run the tool, end on
    ``submit`` or when the step budget is used up. Subclasses give ``_start`` (the episode's
    state from the task), ``_tool`` and ``evaluate``."""

    name: str

    def __init__(self, max_steps: int = 40) -> None:
        self.max_steps = max_steps
        self.task: Task | None = None
        self.steps = 0
        self.done = False

    def reset(self, task: Task) -> str:
        self.task = task
        self._start(task)
        self.steps, self.done = 0, False
        self.max_steps = int(task.meta.get("max_steps", self.max_steps))
        return task.prompt

    def _start(self, task: Task) -> None:
        raise NotImplementedError

    def _tool(self, call: dict[str, Any]) -> str:
        raise NotImplementedError

    def evaluate(self) -> Verification:
        raise NotImplementedError

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "step() before reset()"
        if self.done:
            return StepResult("", True, self.evaluate())
        self.steps += 1
        try:
            call = parse_action(action)
            if call["tool"] == "submit":
                self.done = True
                return StepResult("submitted", True, self.evaluate())
            observation = self._tool(call)
        except ActionError as exc:
            observation = f"error: {exc}"
        except (ArithmeticError, TypeError, ValueError, RecursionError, MemoryError) as exc:
            # Whatever a turn makes a tool do is that turn's outcome, never a crash of the episode.
            observation = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        if self.steps >= self.max_steps:
            self.done = True
            return StepResult(observation + "\nstep budget used up", True, self.evaluate())
        return StepResult(observation, False)


_TOOL_START = re.compile(r'\{\s*"tool"\s*:')
_DECODER = json.JSONDecoder()


def parse_action(text: str) -> dict[str, Any]:
    """The tool call in a model turn: the last JSON object with a ``tool`` key (in a
    ``<tool_call>`` block when there are any). Values may hold braces (code, f-strings):

    >>> parse_action('I will look. {"tool": "get", "key": "x"}')
    {'tool': 'get', 'key': 'x'}
    >>> parse_action('{"tool": "write", "content": "d = {x: 1}"} done')["content"]
    'd = {x: 1}'
    """
    tagged = [content for _, _, content in tag_spans(text, "tool_call")]  # linear, however many tags
    if tagged:
        candidates = tagged
    else:
        # Objects that open with their tool key, decoded in place (the last 20: linear in the text),
        # then flat objects with the key anywhere.
        for match in reversed(list(_TOOL_START.finditer(text))[-20:]):
            try:
                value, _ = _DECODER.raw_decode(text, match.start())
            except (ValueError, RecursionError):
                continue
            if isinstance(value, dict) and isinstance(value.get("tool"), str):
                return value
        candidates = re.findall(r"\{[^{}]*\}", text)
    for raw in reversed(candidates):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, nested too deep, an integer too long
            continue
        if isinstance(value, dict) and isinstance(value.get("tool"), str):
            return value
    raise ActionError('no tool call found: reply with one JSON object such as {"tool": "...", ...}')


def split_actions(transcript: str) -> list[str]:
    """Model turns in a whole transcript: one tool call per line (or per ``<tool_call>`` block).

    >>> split_actions('<tool_call>{"tool": "a"}</tool_call> x <tool_call>b' + "<tool_call>" * 3)
    ['<tool_call>{"tool": "a"}</tool_call>']
    """
    tagged = [transcript[start:end] for start, end, _ in tag_spans(transcript, "tool_call")]
    if tagged:
        return tagged
    return [line for line in transcript.splitlines() if '"tool"' in line]
