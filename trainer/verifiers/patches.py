"""Unified diffs of a file tree, written and applied by trusted code (no ``git``, no ``patch``).

A tree is ``{path: text}``. :func:`tree_diff` writes the change from one tree to another in
git's format (``diff --git a/p b/p``, ``--- a/p`` / ``+++ b/p``, ``/dev/null`` for added and
deleted files, ``@@`` hunks with three lines of context); :func:`apply_patch` applies such a diff,
written by this module or by a model, to a tree. A hunk applies where its old lines match exactly,
at the line it names (shifted by what the hunks before it added) or, failing that, at the nearest
place they match; a hunk that matches nowhere, a file that a hunk adds but that exists, or one it
changes but that does not exist, is a :class:`PatchError` naming the file and the hunk; so is a
path that is absolute or has an empty, ``.`` or ``..`` part (it would name a file outside the tree). Work is
bounded by a budget linear in the patch and the tree (hunks that match in many places, or
nowhere in a long file, exhaust it: a ``PatchError``); diffs of files too large for difflib's
quadratic matching are written as one block.

>>> base = {"m.py": "a = 1\\nb = 2\\n"}
>>> patch = tree_diff(base, {"m.py": "a = 1\\nb = 3\\n", "n.py": "c = 4\\n"})
>>> print(patch)
diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1,2 +1,2 @@
 a = 1
-b = 2
+b = 3
diff --git a/n.py b/n.py
new file mode 100644
--- /dev/null
+++ b/n.py
@@ -0,0 +1 @@
+c = 4
<BLANKLINE>
>>> apply_patch(base, patch) == {"m.py": "a = 1\\nb = 3\\n", "n.py": "c = 4\\n"}
True
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

NO_NEWLINE = "\\ No newline at end of file"
MAX_PATCH_CHARS = 400_000
"""A longer patch is refused (the trees here are a few thousand lines)."""
MAX_DIFF_WORK = 4_000_000
"""Above this product of two versions' line counts a file's diff is one block (:func:`_block_diff`):
difflib's matching is quadratic at worst (a permutation of 25,000 lines took 20 s)."""
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The patch is malformed or does not apply; the message says where."""


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _diff_lines(old: str, new: str) -> list[str]:
    a, b = _lines(old), _lines(new)
    if len(a) * len(b) > MAX_DIFF_WORK:
        return _block_diff(a, b)
    out = []
    for line in list(difflib.unified_diff(a, b, n=3))[2:]:
        if line.endswith("\n"):
            out.append(line)
        else:
            out += [line + "\n", NO_NEWLINE + "\n"]
    return out


def common_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many first lines ``a`` and ``b`` share, and how many last lines besides those (the two
    runs never overlap, so ``a[head:len(a) - tail]`` is what differs).

    >>> common_ends(["x", "y", "z"], ["x", "q", "z"]), common_ends(["x", "x"], ["x"])
    ((1, 1), (1, 0))
    """
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def _block_diff(a: list[str], b: list[str]) -> list[str]:
    """One hunk replacing everything between the common first and last lines (linear: for files
    too large for difflib, whose matching is quadratic at worst)."""
    head, tail = common_ends(a, b)
    lo = max(head - 3, 0)
    hi_a, hi_b = min(len(a) - tail + 3, len(a)), min(len(b) - tail + 3, len(b))
    body = ([" " + x for x in a[lo:head]] + ["-" + x for x in a[head:len(a) - tail]] + ["+" + x for x in b[head:len(b) - tail]]
            + [" " + x for x in a[len(a) - tail:hi_a]])
    old_len, new_len = hi_a - lo, hi_b - lo
    out = [f"@@ -{lo + 1 if old_len else lo},{old_len} +{lo + 1 if new_len else lo},{new_len} @@\n"]
    for line in body:
        if line.endswith("\n"):
            out.append(line)
        else:
            out += [line + "\n", NO_NEWLINE + "\n"]
    return out


def tree_diff(base: dict[str, str], final: dict[str, str]) -> str:
    """The change from ``base`` to ``final`` as a git-style unified diff ('' when they are equal)."""
    out: list[str] = []
    for path in sorted(set(base) | set(final)):
        old, new = base.get(path), final.get(path)
        if old == new:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out += ["new file mode 100644\n", "--- /dev/null\n", f"+++ b/{path}\n"]
        elif new is None:
            out += ["deleted file mode 100644\n", f"--- a/{path}\n", "+++ /dev/null\n"]
        else:
            out += [f"--- a/{path}\n", f"+++ b/{path}\n"]
        out += _diff_lines(old or "", new or "")
    return "".join(out)


@dataclass
class _Hunk:
    start: int
    """1-based line of the old file the hunk begins at (0 for an empty old side)."""
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


@dataclass
class _FilePatch:
    old_path: str | None
    new_path: str | None
    hunks: list[_Hunk] = field(default_factory=list)


def _path(header: str, prefix: str) -> str | None:
    """The file a ``---``/``+++`` header names: a relative path inside the tree (``PatchError``
    for an absolute one or one with an empty, ``.`` or ``..`` part, which would leave the tree)."""
    name = header.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(prefix):
        name = name[len(prefix):]
    if not name or name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in name.split("/")):
        raise PatchError(f"invalid path {name!r}: a path must be relative and inside the tree (no empty, '.' or '..' part)")
    return name


def parse_patch(patch: str) -> list[_FilePatch]:
    """The file sections of a unified diff (``PatchError`` when it has none or is malformed)."""
    if len(patch) > MAX_PATCH_CHARS:
        raise PatchError(f"the patch is {len(patch)} characters; at most {MAX_PATCH_CHARS}")
    lines = patch.splitlines(keepends=True)
    files: list[_FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            current = _FilePatch(_path(line[4:], "a/"), _path(lines[i + 1][4:], "b/"))
            if current.old_path is None and current.new_path is None:
                raise PatchError("a file section names /dev/null on both sides")
            files.append(current)
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise PatchError(f"line {i + 1}: a hunk before any ---/+++ file header")
            old_count = int(match.group(2)) if match.group(2) is not None else 1
            new_count = int(match.group(4)) if match.group(4) is not None else 1
            hunk = _Hunk(int(match.group(1)))
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_count or seen_new < new_count):
                body = lines[i]
                tag, text = body[:1], body[1:]
                if body.startswith("\\"):
                    _drop_newline(hunk)
                elif tag == " " or body in ("\n", "\r\n"):
                    text = text if tag == " " else "\n"
                    hunk.old.append(text)
                    hunk.new.append(text)
                    seen_old, seen_new = seen_old + 1, seen_new + 1
                elif tag == "-":
                    hunk.old.append(text)
                    seen_old += 1
                elif tag == "+":
                    hunk.new.append(text)
                    seen_new += 1
                else:
                    raise PatchError(f"line {i + 1}: the hunk of {files[-1].new_path or files[-1].old_path} ends early "
                                     f"({seen_old} of {old_count} old lines, {seen_new} of {new_count} new)")
                i += 1
            if seen_old != old_count or seen_new != new_count:
                raise PatchError(f"the last hunk of {files[-1].new_path or files[-1].old_path} is cut short")
            if i < len(lines) and lines[i].startswith("\\"):
                _drop_newline(hunk)
                i += 1
            files[-1].hunks.append(hunk)
            continue
        i += 1  # diff --git, index, mode lines and prose around the diff
    if not files:
        raise PatchError("no file changes found (a unified diff has ---/+++ headers and @@ hunks)")
    return files


def _drop_newline(hunk: _Hunk) -> None:
    """``\\ No newline at end of file`` after the last line of either side."""
    for side in (hunk.new, hunk.old):
        if side and side[-1].endswith("\n"):
            side[-1] = side[-1][:-1]
            return


class _Budget:
    """Line comparisons a patch may spend placing its hunks: linear in the patch and the tree."""

    def __init__(self, lines: int) -> None:
        self.left = lines

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise PatchError("the hunks match in too many places to place them (the patch takes too long to apply)")


def _find(lines: list[str], old: list[str], start: int, budget: _Budget) -> int:
    """Where ``old`` matches in ``lines``: at ``start`` if it does there, else the nearest match."""
    if not old:
        return min(max(start, 0), len(lines))
    width = len(old)
    start = min(max(start, 0), max(len(lines) - width, 0))
    for offset in range(len(lines) + 1):
        for at in ((start,) if offset == 0 else (start - offset, start + offset)):
            if 0 <= at <= len(lines) - width:
                budget.spend(1)
                if lines[at] == old[0]:
                    budget.spend(width)
                    if lines[at:at + width] == old:
                        return at
        if start - offset < 0 and start + offset > len(lines) - width:
            break
    return -1


def apply_patch(tree: dict[str, str], patch: str) -> dict[str, str]:
    """A new tree: ``tree`` with ``patch`` applied (the input is not changed)."""
    out = dict(tree)
    sections = parse_patch(patch)
    budget = _Budget(8 * (len(patch) // 8 + sum(t.count("\n") + 1 for t in tree.values())) + 10_000)
    for section in sections:
        name = section.new_path or section.old_path
        assert name is not None
        if section.old_path is None:
            if name in out:
                raise PatchError(f"{name}: the patch creates it, but it exists")
            lines: list[str] = []
        else:
            if section.old_path not in out:
                raise PatchError(f"{section.old_path}: no such file")
            lines = _lines(out[section.old_path])
        delta = 0  # lines the hunks applied so far added (git's offset for the next one)
        for number, hunk in enumerate(section.hunks, 1):
            hint = hunk.start if not hunk.old else hunk.start - 1  # "-N,0": after line N
            at = _find(lines, hunk.old, max(hint, 0) + delta, budget)
            if at < 0:
                raise PatchError(f"{name}: hunk {number} (@@ -{hunk.start}) does not match the file")
            lines[at:at + len(hunk.old)] = hunk.new
            delta += len(hunk.new) - len(hunk.old)
        if section.new_path is None:
            if lines:
                raise PatchError(f"{name}: the patch deletes it but leaves {len(lines)} lines")
            out.pop(section.old_path, None)
            continue
        if section.old_path is not None and section.old_path != section.new_path:
            out.pop(section.old_path, None)
        out[section.new_path] = "".join(lines)
    return out
