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
>>> parse_number("twelve") is None
True
>>> last_number("so the total is 42 apples, or 4.2e1")
42.0
"""
from __future__ import annotations

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


def parse_number(text: str) -> float | None:
    """Parse one number written as an int, decimal, thousands-separated, fraction or percentage.

    Currency signs and surrounding whitespace are ignored; anything else makes it None.
    """
    s = str(text).strip().replace("\u2212", "-")
    s = s.replace("$", "").replace("€", "").replace("£", "").replace(" ", "")
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2]
    percent = s.endswith("%")
    if percent:
        s = s[:-1]
    if not s:
        return None
    try:
        if "/" in s:
            num, den = s.split("/", 1)
            value = float(num.replace(",", "")) / float(den.replace(",", ""))
        else:
            if "," in s and not re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s):
                return None
            value = float(s.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return value / 100.0 if percent else value


def last_number(text: str) -> float | None:
    """The last number that appears anywhere in ``text`` (None when there is none)."""
    found = _NUMBER.findall(str(text))
    return parse_number(found[-1]) if found else None
