"""The functions the software-engineering repositories are made of (:mod:`trainer.families.swe.repos`).

Each :class:`Kernel` is a small, correct, documented Python function of one module of a
generated package, with planted bugs (text replacements that change what it returns on some
inputs), the names a rename may give it, and a generator of arguments. The expected values of
every hidden test are computed here, in the verifier's process, by running the correct source
(trusted: it is this file's text, never the policy's).

>>> k = KERNELS["slugify"]
>>> k.reference()("  Hello, World! ")
'hello-world'
>>> k.buggy(0)("  Hello, World! ")
'ello-orld'
"""
from __future__ import annotations

import functools
import random
import string
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

MODULES: dict[str, tuple[str, list[str]]] = {
    "text": ("Helpers for short pieces of text.", ["re"]),
    "mathx": ("Small numeric helpers.", []),
    "seqs": ("Helpers for lists and sequences.", []),
    "timefmt": ("Durations and calendar helpers.", ["re"]),
}
"""Module name -> (its docstring, the standard modules it imports)."""

MOVE_TARGETS = {"text": "strings", "mathx": "stats", "seqs": "listops", "timefmt": "calendar_utils"}
"""Where a ``move`` refactor sends a function of each module (a new module of the package)."""


@dataclass(frozen=True)
class Kernel:
    """One function of a generated repository."""

    name: str
    """The function's name."""
    module: str
    """The module it lives in (a key of :data:`MODULES`)."""
    source: str
    """Its correct source: the ``def`` with a docstring holding one example."""
    bugs: tuple[tuple[str, str], ...]
    """Planted bugs: ``(old, new)`` replacements in ``source``."""
    args: Callable[[random.Random], tuple]
    """A random argument tuple."""
    fixed: tuple[tuple, ...] = ()
    """Argument tuples every hidden test set includes (edges)."""
    renames: tuple[str, ...] = field(default=())
    """Names a rename refactor may give it."""

    def reference(self) -> Callable[..., Any]:
        """The correct function (this module's own source, compiled here)."""
        return _compiled(self.name, -1)

    def bugged_source(self, bug: int) -> str:
        old, new = self.bugs[bug]
        assert self.source.count(old) == 1, (self.name, old)
        return self.source.replace(old, new)

    def buggy(self, bug: int) -> Callable[..., Any]:
        """The function with planted bug ``bug``."""
        return _compiled(self.name, bug)

    def stub_source(self) -> str:
        """The ``def`` line and docstring with a body that raises NotImplementedError."""
        start = self.source.index('"""')
        doc_end = self.source.index('"""', start + 3) + 3
        return self.source[:doc_end] + "\n    raise NotImplementedError\n"


@functools.cache
def _compiled(name: str, bug: int) -> Callable[..., Any]:
    kernel = KERNELS[name]
    return _compile(kernel.source if bug < 0 else kernel.bugged_source(bug), name, kernel.module)


def _compile(source: str, name: str, module: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    for imported in MODULES[module][1]:
        namespace[imported] = __import__(imported)
    exec(compile(source, f"<kernel {name}>", "exec"), namespace)  # noqa: S102 - this file's own source
    return namespace[name]


def call(fn: Callable[..., Any], args: tuple) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raises", exception type name)``."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - a kernel's error is part of its behaviour
        return "raises", type(exc).__name__


def _words(rng: random.Random, n: int, *, caps: bool = True, punct: bool = True) -> str:
    pool = ["the", "of", "and", "a", "in", "on", "river", "stone", "Quick", "brown", "fox", "HTTP", "data", "map",
            "Lord", "rings", "an", "open", "source", "v2", "x", "delta", "ALPHA"]
    out = []
    for _ in range(n):
        w = rng.choice(pool)
        if caps and rng.random() < 0.3:
            w = w.capitalize()
        if punct and rng.random() < 0.25:
            w += rng.choice([",", ".", "!", "?", ";"])
        out.append(w)
    sep = rng.choice([" ", " ", "  ", " - "])
    return (" " * rng.randint(0, 2)) + sep.join(out) + (" " * rng.randint(0, 2))


def _ints(rng: random.Random, n: int, low: int = -20, high: int = 50) -> list[int]:
    return [rng.randint(low, high) for _ in range(n)]


def _duration_text(rng: random.Random) -> str:
    parts = []
    for unit, top in (("h", 30), ("m", 59), ("s", 59)):
        if rng.random() < 0.7:
            parts.append(f"{rng.randint(0, top)}{unit}")
    return rng.choice(["", " "]).join(parts) or "0s"


def _kernel(name: str, module: str, source: str, bugs, args, fixed=(), renames=()) -> Kernel:
    return Kernel(name, module, textwrap.dedent(source).strip("\n") + "\n", tuple(bugs), args, tuple(fixed),
                  tuple(renames))


KERNELS: dict[str, Kernel] = {k.name: k for k in [
    # ---------------------------------------------------------------- text
    _kernel("slugify", "text", '''
        def slugify(text):
            """Lower-case ``text`` and join its runs of letters and digits with single hyphens.

            >>> slugify("  Hello, World! ")
            'hello-world'
            """
            words = re.findall(r"[a-z0-9]+", text.lower())
            return "-".join(words)
        ''', [("text.lower()", "text"), ('"-".join(words)', '"_".join(words)')],
        lambda r: (_words(r, r.randint(1, 5)),), [("",), ("Already-a-slug",)], ["make_slug", "to_slug"]),
    _kernel("title_case", "text", '''
        def title_case(text, minor=("a", "an", "and", "of", "the", "in", "on")):
            """Capitalise each word of ``text``; minor words stay lower-case unless they come first.

            >>> title_case("the lord of the rings")
            'The Lord of the Rings'
            """
            words = text.lower().split()
            out = []
            for i, word in enumerate(words):
                if i > 0 and word in minor:
                    out.append(word)
                else:
                    out.append(word[:1].upper() + word[1:])
            return " ".join(out)
        ''', [("if i > 0 and word in minor:", "if word in minor:"), ("text.lower().split()", "text.split()")],
        lambda r: (_words(r, r.randint(1, 6), punct=False),), [("the end",), ("",), ("AN OPEN MAP",)],
        ["headline_case", "titlecase"]),
    _kernel("truncate", "text", '''
        def truncate(text, width, suffix="..."):
            """``text`` cut to at most ``width`` characters, ending in ``suffix`` when it was cut.

            >>> truncate("abcdefghij", 6)
            'abc...'
            """
            if len(text) <= width:
                return text
            return text[:max(width - len(suffix), 0)] + suffix
        ''', [("if len(text) <= width:", "if len(text) < width:"), ("width - len(suffix)", "width")],
        lambda r: ("".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(0, 14))), r.randint(4, 12)),
        [("abcdef", 6), ("abcdefg", 6), ("", 4)], ["shorten", "clip_text"]),
    _kernel("count_words", "text", '''
        def count_words(text):
            """How many times each word occurs in ``text`` (letters only, any case), in first-seen order.

            >>> count_words("The cat and the hat.")
            {'the': 2, 'cat': 1, 'and': 1, 'hat': 1}
            """
            counts = {}
            for word in re.findall(r"[a-z]+", text.lower()):
                counts[word] = counts.get(word, 0) + 1
            return counts
        ''', [("counts.get(word, 0) + 1", "1"), ('re.findall(r"[a-z]+", text.lower())', "text.lower().split()")],
        lambda r: (_words(r, r.randint(2, 9)),), [("",), ("a a A, a.",)], ["word_counts", "tally_words"]),
    _kernel("wrap_lines", "text", '''
        def wrap_lines(text, width):
            """The words of ``text`` in lines of at most ``width`` characters, filled greedily (a
            longer word gets a line of its own).

            >>> wrap_lines("the quick brown fox", 10)
            ['the quick', 'brown fox']
            """
            lines, line = [], ""
            for word in text.split():
                if line and len(line) + 1 + len(word) > width:
                    lines.append(line)
                    line = word
                else:
                    line = f"{line} {word}" if line else word
            if line:
                lines.append(line)
            return lines
        ''', [("len(line) + 1 + len(word) > width", "len(line) + 1 + len(word) >= width"),
              ("    if line:\n        lines.append(line)\n", "")],
        lambda r: (_words(r, r.randint(1, 9), caps=False, punct=False), r.randint(4, 14)),
        [("aa bb cc", 5), ("", 3), ("abcdefgh ab", 4)], ["wrap_text", "fill_lines"]),
    # ---------------------------------------------------------------- mathx
    _kernel("clamp", "mathx", '''
        def clamp(x, low, high):
            """``x`` limited to the range from ``low`` to ``high`` (ValueError when low > high).

            >>> clamp(15, 0, 10)
            10
            """
            if low > high:
                raise ValueError("low must not exceed high")
            return max(low, min(x, high))
        ''', [("max(low, min(x, high))", "min(high, max(x, low - 1))"), ("if low > high:", "if low >= high:")],
        lambda r: (r.randint(-30, 30), r.randint(-10, 0), r.randint(0, 10)), [(5, 5, 5), (-3, 0, 0), (3, 4, 2)],
        ["bound", "limit"]),
    _kernel("mean", "mathx", '''
        def mean(values):
            """The arithmetic mean of ``values`` (ValueError when there are none).

            >>> mean([1, 2, 3, 4])
            2.5
            """
            values = list(values)
            if not values:
                raise ValueError("mean of no values")
            return sum(values) / len(values)
        ''', [("sum(values) / len(values)", "sum(values) // len(values)"), ("sum(values) /", "sum(values[1:]) /")],
        lambda r: (_ints(r, r.randint(1, 8)),), [([],), ([7],), ([1, 2],)], ["average", "arithmetic_mean"]),
    _kernel("median", "mathx", '''
        def median(values):
            """The middle value of ``values`` (the mean of the two middle ones for an even count).

            >>> median([3, 1, 4, 1])
            2.0
            """
            ordered = sorted(values)
            if not ordered:
                raise ValueError("median of no values")
            mid = len(ordered) // 2
            if len(ordered) % 2:
                return ordered[mid]
            return (ordered[mid - 1] + ordered[mid]) / 2
        ''', [("ordered = sorted(values)", "ordered = list(values)"),
              ("(ordered[mid - 1] + ordered[mid]) / 2", "ordered[mid]")],
        lambda r: (_ints(r, r.randint(1, 8)),), [([],), ([5],), ([2, 1],)], ["middle_value", "median_of"]),
    _kernel("moving_average", "mathx", '''
        def moving_average(values, window):
            """The mean of every run of ``window`` consecutive values, in order.

            >>> moving_average([1, 2, 3, 4, 5], 2)
            [1.5, 2.5, 3.5, 4.5]
            """
            if window < 1:
                raise ValueError("window must be at least 1")
            return [sum(values[i:i + window]) / window for i in range(len(values) - window + 1)]
        ''', [("range(len(values) - window + 1)", "range(len(values) - window)"), ("/ window for", "/ len(values) for")],
        lambda r: (_ints(r, r.randint(2, 9)), r.randint(1, 3)), [([1, 2, 3], 3), ([4], 2)],
        ["rolling_mean", "window_means"]),
    _kernel("percent_change", "mathx", '''
        def percent_change(old, new):
            """The change from ``old`` to ``new`` in percent of ``old``'s size, rounded to 2 decimals.

            >>> percent_change(80, 100)
            25.0
            """
            if old == 0:
                raise ValueError("no percent change from 0")
            return round((new - old) / abs(old) * 100, 2)
        ''', [("(new - old) / abs(old)", "(new - old) / new"), ("/ abs(old) *", "/ old *")],
        lambda r: (r.choice([-1, 1]) * r.randint(1, 400), r.randint(-400, 400)), [(-50, -25), (10, 10), (0, 5)],
        ["pct_change", "relative_change"]),
    _kernel("to_roman", "mathx", '''
        def to_roman(number):
            """``number`` (1 to 3999) in Roman numerals.

            >>> to_roman(1994)
            'MCMXCIV'
            """
            if not 0 < number < 4000:
                raise ValueError("out of range")
            out = []
            for value, letters in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                                   (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
                while number >= value:
                    out.append(letters)
                    number -= value
            return "".join(out)
        ''', [('(4, "IV"), ', ""), ('(900, "CM"), ', "")],
        lambda r: (r.randint(1, 3999),), [(4,), (944,), (3999,), (0,)], ["roman", "as_roman"]),
    # ---------------------------------------------------------------- seqs
    _kernel("chunk", "seqs", '''
        def chunk(items, size):
            """``items`` in consecutive lists of ``size`` (the last may be shorter).

            >>> chunk([1, 2, 3, 4, 5], 2)
            [[1, 2], [3, 4], [5]]
            """
            if size < 1:
                raise ValueError("size must be at least 1")
            items = list(items)
            return [items[i:i + size] for i in range(0, len(items), size)]
        ''', [("range(0, len(items), size)", "range(0, len(items) - size + 1, size)"),
              ("if size < 1:", "if size < 2:")],
        lambda r: (_ints(r, r.randint(0, 9)), r.randint(1, 4)), [([1, 2, 3], 1), ([], 2)], ["batched", "split_every"]),
    _kernel("dedupe", "seqs", '''
        def dedupe(items):
            """``items`` without repeats, each kept where it first occurs.

            >>> dedupe([3, 1, 3, 2, 1])
            [3, 1, 2]
            """
            seen, out = set(), []
            for item in items:
                if item not in seen:
                    seen.add(item)
                    out.append(item)
            return out
        ''', [("            seen.add(item)\n", ""), ("for item in items:", "for item in sorted(items):")],
        lambda r: (_ints(r, r.randint(0, 9), 0, 6),), [([],), ([2, 2, 2],)], ["unique", "distinct"]),
    _kernel("flatten", "seqs", '''
        def flatten(nested):
            """Every item of ``nested`` that is not a list, in order, from lists inside lists at any depth.

            >>> flatten([1, [2, [3, 4]], 5])
            [1, 2, 3, 4, 5]
            """
            out = []
            for item in nested:
                if isinstance(item, list):
                    out.extend(flatten(item))
                else:
                    out.append(item)
            return out
        ''', [("out.extend(flatten(item))", "out.extend(item)"),
              ("if isinstance(item, list):", "if isinstance(item, list) and item:")],
        lambda r: (_nested(r, 3),), [([],), ([[], [[]], 1],)], ["flat", "unnest"]),
    _kernel("merge_intervals", "seqs", '''
        def merge_intervals(intervals):
            """Overlapping or touching ``[start, end]`` intervals merged, sorted by start.

            >>> merge_intervals([[5, 8], [1, 3], [2, 4]])
            [[1, 4], [5, 8]]
            """
            merged = []
            for start, end in sorted(intervals):
                if merged and start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            return merged
        ''', [("start <= merged[-1][1]", "start < merged[-1][1]"), ("max(merged[-1][1], end)", "end")],
        lambda r: ([sorted([r.randint(0, 20), r.randint(0, 20)]) for _ in range(r.randint(0, 5))],),
        [([[1, 2], [2, 3]],), ([[1, 10], [2, 3]],), ([],)], ["union_intervals", "combine_ranges"]),
    _kernel("rotate", "seqs", '''
        def rotate(items, k):
            """``items`` rotated ``k`` places to the right (to the left for a negative ``k``).

            >>> rotate([1, 2, 3, 4, 5], 2)
            [4, 5, 1, 2, 3]
            """
            items = list(items)
            if not items:
                return []
            k %= len(items)
            return items[-k:] + items[:-k] if k else items
        ''', [("    k %= len(items)\n", ""), ("items[-k:] + items[:-k]", "items[k:] + items[:k]")],
        lambda r: (_ints(r, r.randint(0, 7)), r.randint(-9, 9)), [([1, 2, 3], 3), ([1, 2, 3], 7), ([], 2)],
        ["rotate_right", "shift_items"]),
    _kernel("binary_search", "seqs", '''
        def binary_search(items, target):
            """The index of ``target`` in the sorted list ``items``, or -1 when it is absent.

            >>> binary_search([1, 3, 5, 7], 5)
            2
            """
            low, high = 0, len(items) - 1
            while low <= high:
                mid = (low + high) // 2
                if items[mid] == target:
                    return mid
                if items[mid] < target:
                    low = mid + 1
                else:
                    high = mid - 1
            return -1
        ''', [("while low <= high:", "while low < high:"), ("low, high = 0, len(items) - 1", "low, high = 0, len(items) - 2")],
        lambda r: (sorted(r.sample(range(40), r.randint(0, 9))), r.randint(0, 40)), [([1, 3, 5], 5), ([2], 2), ([], 1)],
        ["find_sorted", "bisect_index"]),
    # ---------------------------------------------------------------- timefmt
    _kernel("parse_duration", "timefmt", '''
        def parse_duration(text):
            """Seconds in a duration such as ``"1h30m"``, ``"45s"`` or ``"2h 5s"`` (units h, m and s).

            >>> parse_duration("1h30m15s")
            5415
            """
            total = 0
            for amount, unit in re.findall(r"(\\d+)\\s*([hms])", text):
                total += int(amount) * {"h": 3600, "m": 60, "s": 1}[unit]
            return total
        ''', [('"m": 60', '"m": 100'), ('r"(\\d+)\\s*([hms])"', 'r"(\\d)\\s*([hms])"')],
        lambda r: (_duration_text(r),), [("12m",), ("",)], ["duration_seconds", "seconds_in"]),
    _kernel("format_duration", "timefmt", '''
        def format_duration(seconds):
            """``seconds`` as hours, minutes and seconds, leaving out the parts that are 0 (``"0s"`` for 0).

            >>> format_duration(3725)
            '1h 2m 5s'
            """
            hours, rest = divmod(seconds, 3600)
            minutes, secs = divmod(rest, 60)
            parts = [f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v]
            return " ".join(parts) or "0s"
        ''', [(' if v]', "]"), ('" ".join(parts) or "0s"', '" ".join(parts)')],
        lambda r: (r.choice([r.randint(0, 59), r.randint(60, 3599), r.randint(3600, 90000)]),), [(0,), (3600,), (61,)],
        ["human_duration", "duration_text"]),
    _kernel("is_leap_year", "timefmt", '''
        def is_leap_year(year):
            """True for the leap years of the Gregorian calendar.

            >>> is_leap_year(2000), is_leap_year(1900)
            (True, False)
            """
            return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        ''', [(" and (year % 100 != 0 or year % 400 == 0)", ""), ("year % 400 == 0", "year % 40 == 0")],
        lambda r: (r.choice([r.randint(1600, 2400), 100 * r.randint(16, 24), 4 * r.randint(400, 600)]),),
        [(2000,), (1900,), (2200,), (2024,)], ["leap_year", "is_leap"]),
    _kernel("days_in_month", "timefmt", '''
        def days_in_month(year, month):
            """How many days ``month`` (1 to 12) of ``year`` has.

            >>> days_in_month(2024, 2)
            29
            """
            if month == 2:
                return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
            return 30 if month in (4, 6, 9, 11) else 31
        ''', [("(4, 6, 9, 11)", "(4, 6, 9)"), (" and (year % 100 != 0 or year % 400 == 0)", "")],
        lambda r: (r.choice([1900, 2000, 2023, 2024, 2100, r.randint(1800, 2200)]), r.randint(1, 12)),
        [(1900, 2), (2023, 11), (2024, 2)], ["month_length", "month_days"]),
]}
"""Every kernel, by name."""


def _nested(rng: random.Random, depth: int) -> list:
    out: list = []
    for _ in range(rng.randint(0, 4)):
        if depth and rng.random() < 0.35:
            out.append(_nested(rng, depth - 1))
        else:
            out.append(rng.randint(0, 9))
    return out


def by_module(module: str) -> list[Kernel]:
    """The kernels of one module, in a fixed order."""
    return [k for k in KERNELS.values() if k.module == module]
