"""``ast.parse`` serialised across threads: a workaround for a CPython bug.

CPython before 3.13 keeps the recursion depth of its AST constructor (the C code that turns a
parsed tree into ``ast`` objects) in state shared by every thread of the interpreter. When two
threads parse at once (the GIL can change hands inside the constructor, e.g. when an allocation
runs the garbage collector), one of them fails with ``SystemError: AST constructor recursion
depth mismatch`` (gh-106905; seen here with CPython 3.11.7 in a verify pool that builds four
HumanEval jobs at once). Verification builds jobs, parses tests and scores answers in threads,
and libraries it calls (``ast.literal_eval`` in reasoning-gym's scorers) parse too, so
:func:`install` (run when :mod:`trainer` is imported) makes ``ast.parse``, which
``ast.literal_eval`` calls, take one process-wide lock. Parsing is short (tens of
microseconds for a test), so the lock costs nothing measurable.

>>> import ast, threading
>>> install()
>>> errors = []
>>> def parse_many():
...     try:
...         for _ in range(200):
...             ast.parse("def f(x):\\n    return [x + i for i in range(3)]\\n" * 5)
...     except SystemError as e:
...         errors.append(e)
>>> threads = [threading.Thread(target=parse_many) for _ in range(4)]
>>> for t in threads: t.start()
>>> for t in threads: t.join()
>>> errors
[]
>>> ast.literal_eval("[1, (2, 3)]")
[1, (2, 3)]
"""
from __future__ import annotations

import ast
import functools
import sys
import threading

_LOCK = threading.RLock()
"""Held while the interpreter builds ``ast`` objects (reentrant: a finaliser may parse too)."""


def install() -> None:
    """Make ``ast.parse`` (and so ``ast.literal_eval``) take :data:`_LOCK`; idempotent, and a
    no-op on CPython 3.13 and later, whose AST state is per call."""
    if sys.version_info >= (3, 13) or getattr(ast.parse, "__temper_locked__", False):
        return
    unlocked = ast.parse

    @functools.wraps(unlocked)
    def parse(*args, **kwargs):
        with _LOCK:
            return unlocked(*args, **kwargs)

    parse.__temper_locked__ = True
    ast.parse = parse
