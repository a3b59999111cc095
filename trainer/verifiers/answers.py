"""One final answer per completion: where the answers are, and when an answer states several values.

A policy trained on a reward finds every way to be right by saying more than one thing: two
``\\boxed{}``, an ``<answer>`` tag and a box that disagree, ``X or Y``, ``X, Y``, ``X/Y``, one
value per line. The rule the verifier stages share: a completion gives **one** final answer, and
an answer that states more values than the gold does fails.

:func:`final_answers` lists every answer container in a completion (all boxes, all answer tags,
in order; the final line only when there is no container); :func:`distinct_answers` keeps one of
each value written the same way; :func:`hedge_reason` says why an answer states more than the
gold, or None.

>>> final_answers(r"\\boxed{3} hmm, or \\boxed{5}")
['3', '5']
>>> final_answers("<answer>\\\\boxed{7}</answer>")
['7']
>>> final_answers("no container\\nFinal answer: 12")
['12']
>>> distinct_answers(["x = 5", "x=5", " X = 5 "])
['x = 5']
>>> hedge_reason("3 or 5", "5")
"'or' joins several values (the gold has none)"
>>> hedge_reason("1,000", 1000) is None
True
"""
from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

CONTAINER_METHODS = ("boxed", "answer_tag")
METHODS = ("boxed", "answer_tag", "final_line")
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
_JOINED_AFTER = re.compile(r"^[\s$.)\]]*(?:/|\bor\b|\beither\b|\bnor\b|\\text\s*\{\s*or\b)", re.I)
_JOINED_BEFORE = re.compile(r"(?:\bor\b|\beither\b|\bnor\b|\\text\s*\{\s*or\s*\})[\s$(\[]*$", re.I)
"""Only "or"-words (and a slash after): a comma or "and" next to a box is ordinary prose
("Therefore, \\boxed{5}, as required")."""
_FINAL_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.I)


def _closing_brace(text: str, i: int) -> int | None:
    """Index of the ``}`` that closes the ``{`` just before ``i`` (None when unbalanced)."""
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return None


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every outermost ``\\boxed{...}`` / ``\\fbox{...}`` (and
    ``\\boxed 5`` without braces, up to the next space), in order.

    >>> [c for _, _, c in boxed_spans(r"\\boxed{\\frac{1}{2}} and \\fbox{3}, \\boxed 4")]
    ['\\\\frac{1}{2}', '3', '4']
    """
    spans: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        m = _BOX.search(text, pos)
        if m is None:
            return spans
        if m.end() < len(text) and text[m.end()] == "{":
            close = _closing_brace(text, m.end() + 1)
            if close is None:  # unbalanced: not a container
                return spans
            spans.append((m.start(), close + 1, text[m.end() + 1:close].strip()))
            pos = close + 1
            continue
        token = re.match(r"[^\s{}$\\]+", text[m.end():])
        if token:
            spans.append((m.start(), m.end() + token.end(), token.group(0)))
        pos = m.end() + (token.end() if token else 0)


def unbox(text: str) -> str:
    """``text`` with every ``\\boxed{X}`` replaced by ``X``.

    >>> unbox(r"\\boxed{3} or \\boxed{\\boxed{5}}")
    '3 or 5'
    """
    for _ in range(20):  # nested boxes; a bound keeps a pathological input cheap
        spans = boxed_spans(text)
        if not spans:
            return text
        out, pos = [], 0
        for start, end, content in spans:
            out += [text[pos:start], content]
            pos = end
        text = "".join(out) + text[pos:]
    return text


def tag_spans(text: str, tag: str = "answer") -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every ``<tag>...</tag>`` pair (case-insensitive), in order: each
    opening tag with the first closing tag after it, as a non-greedy regex would pair them, in
    linear time (50,000 unclosed tags must not cost minutes).

    >>> [c for _, _, c in tag_spans("<answer>1</answer> <ANSWER id=2> 2 </answer > <answer>3")]
    ['1', '2']
    """
    opens = list(re.finditer(rf"<{re.escape(tag)}(?:\s[^<>]*)?>", text, re.I))
    closes = list(re.finditer(rf"</{re.escape(tag)}\s*>", text, re.I))
    spans: list[tuple[int, int, str]] = []
    j, pos = 0, 0
    for opening in opens:
        if opening.start() < pos:
            continue
        while j < len(closes) and closes[j].start() < opening.end():
            j += 1
        if j == len(closes):
            break
        closing = closes[j]
        spans.append((opening.start(), closing.end(), text[opening.end():closing.start()].strip()))
        pos = closing.end()
    return spans


def final_line(text: str) -> str | None:
    """The last non-empty line, without a leading "Final answer:"-style prefix.

    >>> final_line("Let me think.\\nFinal answer: 7\\n\\n")
    '7'
    """
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return None
    return _FINAL_PREFIX.sub("", lines[-1]).strip() or None


def container_spans(text: str, methods: tuple[str, ...] | list[str] = CONTAINER_METHODS,
                    tag: str = "answer") -> list[tuple[int, int, str, str]]:
    """``(start, end, method, content)`` of every answer container, in order of position.

    A tag that holds boxes is one answer (its text with the boxes unwrapped), so
    ``<answer>\\boxed{3} or 5</answer>`` is the answer ``3 or 5``, not ``3``.
    """
    found: list[tuple[int, int, str, str]] = []
    tags = tag_spans(text, tag) if "answer_tag" in methods else []
    for start, end, content in tags:
        found.append((start, end, "answer_tag", unbox(content).strip()))
    if "boxed" in methods:
        for start, end, content in boxed_spans(text):
            if not any(t_start <= start and end <= t_end for t_start, t_end, _ in tags):
                found.append((start, end, "boxed", unbox(content).strip()))
    return sorted(found, key=lambda f: f[0])


def answer_containers(text: str, methods: tuple[str, ...] | list[str] = CONTAINER_METHODS,
                      tag: str = "answer") -> list[tuple[str, str]]:
    """``(method, content)`` of every answer container, in order of position."""
    return [(method, content) for _, _, method, content in container_spans(text, methods, tag)]


def joined_outside(text: str, methods: tuple[str, ...] | list[str] = CONTAINER_METHODS, tag: str = "answer") -> str | None:
    """Why the containers' answer is joined to another value outside them (``<answer>5</answer>
    or 7``, ``7, \\boxed{5}``), else None.

    >>> joined_outside("<answer>5</answer> or 7"), joined_outside(r"It is 7 or $\\boxed{5}$"), joined_outside(r"So \\boxed{5}.")
    ('a value is joined after the final answer', 'a value is joined before the final answer', None)
    """
    spans = container_spans(text, methods, tag)
    if not spans:
        return None
    if _JOINED_AFTER.match(text[spans[-1][1]:]):
        return "a value is joined after the final answer"
    if _JOINED_BEFORE.search(text[:spans[0][0]]):
        return "a value is joined before the final answer"
    return None


def final_answers(text: str, methods: tuple[str, ...] | list[str] = METHODS, tag: str = "answer") -> list[str]:
    """Every answer container found (all ``\\boxed{}``, all ``<tag>`` pairs), in order; the final
    line (when ``final_line`` is among ``methods``) only when there is no container."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown extraction method {sorted(unknown)[0]!r}")
    found = [content for _, content in answer_containers(str(text), tuple(methods), tag)]
    if not found and "final_line" in methods:
        line = final_line(str(text))
        if line is not None:
            found = [line]
    return found


def canonical(answer: str) -> str:
    """The form two answers are compared in to decide whether they are the same text: Unicode
    NFKC, case-folded, math delimiters and a final full stop dropped, no whitespace.

    >>> canonical(" $X = \\\\frac{1}{2}$. ")
    'x=\\\\frac{1}{2}'
    """
    s = unicodedata.normalize("NFKC", str(answer)).strip().rstrip(".").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left):len(s) - len(right)].strip()
    s = s.rstrip(".").casefold()
    return re.sub(r"\s+", "", s)


def distinct_answers(answers: list[str]) -> list[str]:
    """The answers with repeats (equal after :func:`canonical`) removed, first occurrence kept."""
    seen: dict[str, str] = {}
    for answer in answers:
        seen.setdefault(canonical(answer), answer.strip())
    return list(seen.values())


# --- hedges -------------------------------------------------------------------------------------

_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:(?:,|\{,\}|\\,|\\ |~|\u2009|\u202f)\d{3})+(?![\d]|,\d)")
_SUBSCRIPT = re.compile(r"_\{[^{}]*\}|_\w")
_SEPARATORS: list[tuple[str, re.Pattern[str]]] = [
    ("'or'", re.compile(r"\bor\b|\beither\b|\bnor\b|\\lor\b|\\vee\b|∨|\|\||\\text\s*\{\s*or\s*\}", re.I)),
    ("'and'", re.compile(r"\band\b|&|\\land\b|\\wedge\b|∧", re.I)),
    ("'but' / 'vs'", re.compile(r"\bbut\b|\bvs\b\.?|\bversus\b|\binstead\b", re.I)),
    ("a comma or semicolon", re.compile(r"[,;]")),
    ("a slash between words", re.compile(r"[A-Za-z]{2,}\s*/\s*[A-Za-z]{2,}")),
    ("a vertical bar", re.compile(r"(?<![|\\])\|(?!\|)|¦|\\mid\b|\\vert\b")),
    ("plus-or-minus", re.compile(r"\\pm\b|\\mp\b|±|∓|\+/-|\+-")),
    ("a LaTeX line break", re.compile(r"\\\\|\\newline\b")),
    ("LaTeX spacing between values", re.compile(r"\\q?quad\b")),
]
# One number: optional sign, digits with a decimal part, an exponent or "x 10^k", or a fraction.
_FRAC = r"\\[dt]?frac\s*\{\s*[-+]?\s*\d+(?:\.\d+)?\s*\}\s*\{\s*[-+]?\s*\d+(?:\.\d+)?\s*\}"
_ONE_NUMBER = re.compile(
    r"[-+\u2212]?\s*(?:(?:\d+\s*)?" + _FRAC +  # a fraction, or a mixed number 5\frac{2}{3}
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+|\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^\s*\{?\s*[-+]?\d+\s*\}?)?"
    r"(?:\s*/\s*\d+(?:\.\d+)?)?)"
)
_BRACKETS = {"[": "]", "{": "}", "(": ")"}


_SLASH_LEFT = re.compile(r"(?<![\d.}])\(?\s*[-+]?\d+\s*\)?\s*$")
_SLASH_RIGHT = re.compile(r"\s*\(?\s*[-+]?\d+(?![\d.])\s*\)?")
_WHOLE = re.compile(r"[-+]?\d+(?:\.0*)?")


def _slash_reason(answer: str, gold: str) -> str | None:
    """A slash in an answer to one number is a fraction of two whole numbers (``-17/3``), and only
    where the gold is not a whole number: ``4/2`` for 2, ``0.5/1.0`` or ``\\frac{1}{2}/1`` for
    1/2 state two values."""
    if "/" not in answer:
        return None
    if _WHOLE.fullmatch(gold.strip().strip("$ ")):
        return "a slash between numbers where the gold is a whole number"
    for i, ch in enumerate(answer):
        if ch == "/" and not (_SLASH_LEFT.search(answer[:i]) and _SLASH_RIGHT.match(answer[i + 1:])):
            return "a slash that is not a fraction of two whole numbers"
    return None

_LATEX_SPACE = re.compile(r"(?<!\\)\\[,;:! ]")
_LIST_GAP = re.compile(r"[\s()\[\]{}'\"]*")


def _plain(text: str) -> str:
    """Thousands separators, LaTeX spacing and subscripts removed: they separate no values."""
    s = unicodedata.normalize("NFKC", str(text)).replace("\u2212", "-")
    s = _THOUSANDS.sub(lambda m: re.sub(r"\D", "", m.group(0)), s)
    s = _LATEX_SPACE.sub(" ", s)
    return _SUBSCRIPT.sub("", s)


def _lines(text: str) -> int:
    return sum(1 for line in str(text).splitlines() if line.strip())


def _bracketed(text: str) -> bool:
    s = text.strip()
    return len(s) >= 2 and _BRACKETS.get(s[0]) == s[-1]


def count_numbers(text: str) -> int:
    """How many numbers ``text`` states (a fraction, ``1,000`` or ``1.5 \\times 10^{3}`` is one).

    >>> count_numbers(r"x = -\\frac{17}{3}"), count_numbers("1,000"), count_numbers("3x + 5"), count_numbers("1 2 3 4")
    (1, 1, 2, 4)
    """
    return len(_ONE_NUMBER.findall(_plain(text)))


def listed_numbers(text: str) -> int:
    """The longest run of numbers with nothing but spaces or brackets between them: ``1 2 3 4``
    lists four, ``3x + 5`` and ``(-17)/3`` none (an operator or a letter joins them into one value).

    >>> listed_numbers("1 2 3 4"), listed_numbers("3x + 5"), listed_numbers("(-17)/3"), listed_numbers("5 (6)"), listed_numbers("1\\\\,000"), listed_numbers("x^2 + 1")
    (4, 1, 1, 2, 1, 1)
    """
    s = _plain(text)
    matches = list(_ONE_NUMBER.finditer(s))
    best = run = 1 if matches else 0
    for prev, cur in zip(matches, matches[1:]):
        signed = cur.group(0).lstrip()[:1] in "+-"  # "x^2 + 1": the sign is an operator
        run = run + 1 if _LIST_GAP.fullmatch(s[prev.end():cur.start()]) and not signed else 1
        best = max(best, run)
    return best


def is_single_number(gold: Any) -> bool:
    """True when the gold is one number (an int or float, or text that states exactly one)."""
    if isinstance(gold, bool):
        return False
    if isinstance(gold, (int, float)):
        return math.isfinite(float(gold))
    if not isinstance(gold, str):
        return False
    s = _plain(gold).strip()
    return bool(_ONE_NUMBER.fullmatch(s.strip("$ ")))


def hedge_reason(answer: str, gold: Any) -> str | None:
    """Why ``answer`` states more than one final value where ``gold`` states one, else None.

    Separators are counted against the gold's own: ``1, 2`` is no hedge when the gold is ``1, 2``,
    and a thousands separator (``1,000``, ``1{,}000``) is no separator. Only a scalar or string
    gold is compared; for anything else this returns None.

    >>> hedge_reason("Paris or London", "Paris")
    "'or' joins several values (the gold has none)"
    >>> hedge_reason("either 3", "3")
    "'or' joins several values (the gold has none)"
    >>> hedge_reason("x = 2, x = 5", "5")
    'a comma or semicolon joins several values (the gold has none)'
    >>> hedge_reason("4; 5", 5)
    'a comma or semicolon joins several values (the gold has none)'
    >>> hedge_reason("True/False", "True")
    'a slash between words joins several values (the gold has none)'
    >>> hedge_reason("Alice and Bob", "Alice")
    "'and' joins several values (the gold has none)"
    >>> hedge_reason("3\\n5", "5")
    'states 2 lines (the gold 1)'
    >>> hedge_reason("\\\\pm 3", "3")
    'plus-or-minus joins several values (the gold has none)'
    >>> hedge_reason("3 \\\\\\\\ 5", "5")
    'a LaTeX line break joins several values (the gold has none)'
    >>> hedge_reason("3 5", "5")
    'lists 2 numbers where the gold is one number'
    >>> hedge_reason("4/2", "2"), hedge_reason("0.5/1.0", "0.5"), hedge_reason("3/4", "0.75"), hedge_reason("(-17)/3", "-5.67")
    ('a slash between numbers where the gold is a whole number', 'a slash that is not a fraction of two whole numbers', None, None)
    >>> hedge_reason("London | Paris", "Paris")
    'a vertical bar joins several values (the gold has none)'
    >>> [hedge_reason(a, g) for a, g in [("1,000", "1000"), ("1{,}000", 1000), ("x = -7/3", "-\\\\frac{7}{3}"),
    ...                                  ("2, 1", "1, 2"), ("Alice is a knight and Bob is a knave", "Alice is a knight, and Bob is a knave"),
    ...                                  ("1 - 3x + 2x^2", "2x^{2} - 3x + 1"), ("1.5 \\\\times 10^{3}", "1500"),
    ...                                  ("-5\\\\frac{2}{3}", "-\\\\frac{17}{3}"), ("5\\\\,", "5"), ("(-17)/3", "-\\\\frac{17}{3}")]]
    [None, None, None, None, None, None, None, None, None, None]
    >>> hedge_reason("3", {"a": 1}) is None
    True
    """
    if gold is None or isinstance(gold, (dict, list, tuple, set)):
        return None
    a, g = _plain(str(answer)).strip(), _plain(str(gold)).strip()
    if not a:
        return None
    lines_a, lines_g = _lines(a), max(1, _lines(g))
    if lines_a > lines_g and not _bracketed(a):
        return f"states {lines_a} lines (the gold {lines_g})"
    for name, pattern in _SEPARATORS:
        n_a, n_g = len(pattern.findall(a)), len(pattern.findall(g))
        if n_a > n_g:
            return f"{name} joins several values (the gold has {n_g or 'none'})"
    if is_single_number(gold):
        n = listed_numbers(a)
        if n > 1:
            return f"lists {n} numbers where the gold is one number"
        reason = _slash_reason(a, g)
        if reason is not None:
            return reason
    if len(a) > 200 + 10 * len(g):
        return f"the answer is {len(a)} characters long where the gold is {len(g)}"
    return None


def one_final_answer(text: str, methods: tuple[str, ...] | list[str] = METHODS, tag: str = "answer",
                     gold: Any = None) -> tuple[str | None, str | None]:
    """``(answer, None)`` for the completion's one final answer, or ``(None, why)``.

    ``why`` says the completion has no answer, an empty one, several different answers, or an
    answer that hedges against ``gold`` (see :func:`hedge_reason`).

    >>> one_final_answer(r"\\boxed{5}, I mean \\boxed{5}", gold="5")
    ('5', None)
    >>> one_final_answer(r"\\boxed{3} or \\boxed{5}", gold="5")
    (None, 'several different answers: 3 | 5')
    >>> one_final_answer("<answer></answer>")
    (None, 'empty answer')
    """
    found = final_answers(text, methods, tag)
    if not found:
        return None, "no answer found"
    distinct = distinct_answers(found)
    if len(distinct) > 1:
        shown = " | ".join(d[:60] for d in distinct[:5])
        return None, f"several different answers: {shown}"
    answer = distinct[0]
    if not answer.strip():
        return None, "empty answer"
    joined = joined_outside(text, tuple(m for m in methods if m != "final_line"), tag)
    if joined is not None:
        return None, f"hedged answer: {joined}"
    reason = hedge_reason(answer, gold)
    if reason is not None:
        return None, f"hedged answer: {reason}"
    return answer, None
