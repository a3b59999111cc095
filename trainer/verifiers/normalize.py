"""Text and number normalisation shared by the verifier families.

>>> normalize_text("  The Answer:  PARIS. ")
'the answer: paris.'
>>> normalize_text("Hello,  World!", strip_punctuation=True)
'hello world'
>>> parse_number("1,234.5")
1234.5
>>> parse_number("$-3/4")
-0.75
>>> parse_number("12%")
0.12
>>> parse_number("45.23%", percent="points")
45.23
>>> parse_number("twelve") is None
True
>>> [parse_number(s) for s in ["1 2 3 4", "nan", "inf", "1e999", "1,00"]]
[None, None, None, None, None]
>>> parse_number("1{,}000"), parse_number("1\\\\,000"), parse_number("$ 12")
(1000.0, 1000.0, 12.0)
>>> last_number("so the total is 42 apples, or 4.2e1")
42.0
"""
from __future__ import annotations

import math
import re
import string
import unicodedata

_WS = re.compile(r"\s+")
_PUNCT = str.maketrans("", "", string.punctuation)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def normalize_text(
    text: str, *, case_sensitive: bool = False, strip_punctuation: bool = False
) -> str:
    """Unicode-normalise, collapse whitespace, strip; lower-case and drop punctuation on request."""
    text = unicodedata.normalize("NFKC", str(text))
    if not case_sensitive:
        text = text.casefold()
    if strip_punctuation:
        text = text.translate(_PUNCT)
    return _WS.sub(" ", text).strip()


_GROUPING = re.compile(r"(?<=\d)(?:\{,\}|\\,|\u2009|\u202f)(?=\d{3}(?!\d))")
PERCENT_MODES = ("fraction", "points")


def parse_number(text: str, *, percent: str = "fraction") -> float | None:
    """Parse one finite number written as an int, decimal, thousands-separated, fraction or percentage.

    Currency signs and surrounding whitespace are ignored; whitespace inside the number (``1 2 3 4``
    is four numbers, not 1234), NaN, infinities and anything else make it None. Digit groups may
    be separated by ``,`` ``{,}`` ``\\,`` or a thin space, in threes. ``percent``: ``fraction``
    reads ``12%`` as 0.12; ``points`` reads it as 12 (the answer to "as a percentage").
    """
    if percent not in PERCENT_MODES:
        raise ValueError(f"percent must be one of {PERCENT_MODES}, not {percent!r}")
    s = str(text).strip().replace("\u2212", "-")
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2].strip()
    s = _GROUPING.sub(",", s)
    s = re.sub(r"[$€£]", "", s).replace("\\%", "%").strip()
    s = re.sub(r"^([-+])\s+", r"\1", s)
    is_percent = s.endswith("%")
    if is_percent:
        s = s[:-1].strip()
    if not s or re.search(r"\s", s):
        return None
    try:
        if "/" in s:
            num, den = s.split("/", 1)
            value = float(_plain_number(num)) / float(_plain_number(den))
        else:
            value = float(_plain_number(s))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    if not math.isfinite(value):
        return None
    if is_percent and percent == "fraction":
        return value / 100.0
    return value


def _plain_number(s: str) -> str:
    """A decimal literal without thousands separators; ValueError for anything else."""
    if not re.fullmatch(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?", s.replace(",", "")):
        raise ValueError(s)
    if "," in s and not re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        raise ValueError(s)
    return s.replace(",", "")


def is_finite_number(value: object) -> bool:
    """True for an int or float (not a bool) that is neither NaN nor infinite.

    >>> [is_finite_number(v) for v in [1, 2.5, float("nan"), float("inf"), True, "3"]]
    [True, True, False, False, False, False]
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def last_number(text: str) -> float | None:
    """The last number that appears anywhere in ``text`` (None when there is none)."""
    found = _NUMBER.findall(str(text))
    return parse_number(found[-1]) if found else None
