"""JSONL uploads: ``{"prompt", "answer" | "tests", "metadata"?, "id"?, "level"?}`` per line.

:func:`parse_jsonl` returns every line as a Task, or raises :class:`JSONLError` listing every bad
line with its number and field; nothing is returned (so nothing is imported) when any line is
bad. The caller picks the verifier cascade; pass it as ``verifier`` to also check it, and a
cascade with a ``code_tests`` stage requires ``tests`` on every line.

>>> tasks = parse_jsonl('{"prompt": "2+2?", "answer": "4"}\\n{"prompt": "3+3?", "answer": "6", "id": "b"}\\n', domain="upload")
>>> [(t.id, t.answer) for t in tasks]
[('1', '4'), ('b', '6')]
>>> parse_jsonl('{"prompt": "a", "answer": "1"}\\n{"prompt": "b"}\\nnot json\\n')
Traceback (most recent call last):
...
trainer.catalogue.jsonl.JSONLError: 2 bad lines: line 2: answer: required (or tests); line 3: invalid JSON: Expecting value at column 1
"""
from __future__ import annotations

import dataclasses
import json
from typing import IO, Any, Callable, Iterator

from trainer.tasks.base import Task
from trainer.verifiers.stages import validate_cascade

MAX_LINES = 100_000
MAX_LINE_BYTES = 1_000_000
ALLOWED = {"prompt", "answer", "tests", "metadata", "id", "level"}
MAX_LEVEL = 1000
"""Levels are curriculum steps (the catalogue's generators have at most a dozen)."""
MAX_ID_CHARS = 200


class JSONLError(ValueError):
    """Every bad line of an upload: ``errors`` is a list of ``(line_number, field, message)``."""

    def __init__(self, errors: list[tuple[int, str, str]]) -> None:
        self.errors = errors
        shown = "; ".join(f"line {n}: {f + ': ' if f else ''}{m}" for n, f, m in errors[:50])
        more = f"; and {len(errors) - 50} more" if len(errors) > 50 else ""
        super().__init__(f"{len(errors)} bad line{'s' if len(errors) != 1 else ''}: {shown}{more}")


def _check_line(obj: Any, needs_tests: bool) -> list[tuple[str, str]]:
    if not isinstance(obj, dict):
        return [("", "must be a JSON object")]
    errors = []
    prompt = obj.get("prompt")
    if prompt is None:
        errors.append(("prompt", "required"))
    elif not isinstance(prompt, str) or not prompt.strip():
        errors.append(("prompt", "must be a non-empty string"))
    if needs_tests and "tests" not in obj:
        errors.append(("tests", "required by the code_tests stage"))
    elif "answer" not in obj and "tests" not in obj:
        errors.append(("answer", "required (or tests)"))
    if "tests" in obj:
        tests = obj["tests"]
        ok = isinstance(tests, str) and tests.strip() or (isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests))
        if not ok:
            errors.append(("tests", "must be a non-empty string or a list of strings"))
    if "metadata" in obj and not isinstance(obj["metadata"], dict):
        errors.append(("metadata", "must be an object"))
    task_id = obj.get("id")
    if "id" in obj and (not isinstance(task_id, (str, int)) or isinstance(task_id, bool)):
        errors.append(("id", "must be a string or an integer"))
    elif "id" in obj and not (0 < len(str(task_id)) <= MAX_ID_CHARS) or (isinstance(task_id, int) and abs(task_id) >= 2**63):
        errors.append(("id", f"must be 1 to {MAX_ID_CHARS} characters (an integer: below 2**63)"))
    level = obj.get("level")
    if "level" in obj and (not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= MAX_LEVEL):
        errors.append(("level", f"must be an integer from 0 to {MAX_LEVEL}"))
    for key in sorted(set(obj) - ALLOWED):
        errors.append((key, "unknown field"))
    return errors


def parse_jsonl(
    data: str | bytes | IO[bytes],
    *,
    domain: str = "upload",
    verifier: dict[str, Any] | None = None,
    max_lines: int = MAX_LINES,
    loads: Callable[[str], Any] = json.loads,
) -> list[Task]:
    """Parse an upload into Tasks (blank lines skipped); raise :class:`JSONLError` on any bad line.

    ``data`` is the text, its UTF-8 bytes, or a binary file read a line at a time (an upload
    spooled to disk is never read whole). ``loads`` decodes one line; a ValueError from it refuses the line, and one with a
    ``field_errors`` list of ``(field, message)`` names the fields (the control plane passes its
    body reader's, which refuses NaN, NUL and lone surrogates that the database cannot hold)."""
    errors: list[tuple[int, str, str]] = []
    needs_tests = False
    if verifier is not None:
        for path, message in validate_cascade(verifier):
            errors.append((0, path, message))
        stages = verifier.get("stages") if isinstance(verifier, dict) else None
        needs_tests = isinstance(stages, list) and any(isinstance(s, dict) and s.get("type") == "code_tests" for s in stages)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONLError([(data[: exc.start].count(b"\n") + 1, "", "not valid UTF-8")]) from None
    lines = data.splitlines() if isinstance(data, str) else _file_lines(data)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    counted = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        counted += 1
        if counted > max_lines:
            raise JSONLError([(max_lines + 1, "", f"too many lines (at most {max_lines})")])
        if len(line) > MAX_LINE_BYTES:
            errors.append((number, "", f"line longer than {MAX_LINE_BYTES} characters"))
            continue
        try:
            obj = loads(line)
        except json.JSONDecodeError as exc:
            errors.append((number, "", f"invalid JSON: {exc.msg} at column {exc.colno}"))
            continue
        except ValueError as exc:
            errors.extend((number, f, m) for f, m in getattr(exc, "field_errors", [("", str(exc))]))
            continue
        problems = _check_line(obj, needs_tests)
        errors.extend((number, f, m) for f, m in problems)
        if problems:
            continue
        task_id = str(obj.get("id", number))
        if task_id in seen:
            errors.append((number, "id", f"duplicate of line {seen[task_id]}"))
            continue
        seen[task_id] = number
        answer = obj.get("answer")
        meta = dict(obj.get("metadata", {}))
        if "tests" in obj:
            answer = {"tests": obj["tests"], **({"answer": answer} if answer is not None else {})}
            for key in ("entry_point", "prompt_prefix"):
                if key in meta:
                    answer[key if key != "prompt_prefix" else "prompt"] = meta[key]
        tasks.append(Task(domain=domain, id=task_id, prompt=obj["prompt"], answer=answer, level=int(obj.get("level", 0)), meta=meta))
    if errors:
        raise JSONLError(sorted(errors))
    if not tasks:
        raise JSONLError([(1, "", "the upload has no tasks")])
    return tasks


def _file_lines(file: IO[bytes]) -> Iterator[str]:
    """The lines of a binary file, each decoded on its own (a bad byte names its line)."""
    for number, raw in enumerate(file, start=1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise JSONLError([(number, "", "not valid UTF-8")]) from None


@dataclasses.dataclass
class UploadedSource:
    """A task source over uploaded tasks: draws one uniformly with the caller's rng."""

    slug: str
    """Domain slug."""
    tasks: list[Task]
    """The parsed upload."""
    levels: int = 1
    """Uploaded tasks have one level unless they say otherwise."""

    def sample(self, rng: Any, level: int = 0) -> Task:
        pool = [t for t in self.tasks if t.level == level] or self.tasks
        return pool[rng.randrange(len(pool))]
