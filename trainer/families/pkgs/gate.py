"""The static gate of the ``pkg_tests`` stage: what a change to a package's source may not add.

A swe-pkg task's bug is one or two syntax-tree mutations (an operator, a bound, a condition, a
default, an argument), so its fix never needs new machinery. The gate reads each changed source
file (trusted code, from the diff alone, before anything runs) and refuses the change when the
file does not parse, or when it holds MORE of something below than both the starting file and
the package's own file did, each counted where it is: in the same functions and classes, and for
a name or attribute in the same attribute chain (``os.path.join`` is not ``os.write``), so a use
the file has cannot be spent elsewhere (deleted from a function no test calls and written into
the buggy one); code the package already had is never refused, and a fix that puts the original
back always passes (import statements count over the whole file: one may move):

* an import statement (``import x``, ``from x import y``) that the original file does not have;
* a dunder identifier or string: a name, attribute, function or class name, parameter or keyword
  named ``__x__`` (``__eq__``, ``__class__``, ``__globals__``, ``__import__``, ``__builtins__``,
  ``__file__``...), or a string constant holding one (``getattr(o, "__class__")``);
* a name, attribute, definition, parameter or keyword in :data:`FORBIDDEN`, or a string constant
  that is a (dotted) name holding one (``"_pytest.reports"``; prose is not read): ways to end the process or the test run early (``exit``, ``_exit``, ``kill``,
  ``abort``, ``SystemExit``), to reach the interpreter or the test runner (``sys``, ``os``,
  ``modules``, ``_getframe``, ``settrace``, ``gc``, ``ctypes``, ``inspect``, ``builtins``,
  ``pytest``, ``_pytest``, ``unittest``, frame and code attributes), to run other code (``eval``,
  ``exec``, ``compile``, ``subprocess``, ``importlib``), to reach objects by name (``getattr``,
  ``setattr``, ``vars``, ``globals``, ``dictConfig``...), to read or write files or descriptors
  (``open``, ``read_text``, ``FileHandler``, ``_io``, ``_socket``...; not every path API of the
  standard library is listed: the runner's tree is read-only and its records channel is a socket
  with a key, see :mod:`~trainer.families.pkgs.runner`), and
  to make objects that compare equal to anything (``type``, ``object``, ``super``, ``mro``).

A comparing special method the file has (:data:`COMPARING`) may only stay or become the
package's own again, and a function one reaches (:func:`compare_path`) may change only keeping its
shape, as a fix of a mutation does: a compare helper made to return 0 would make every object
equal (a one-token change can still do it; only the pass-to-pass tests stop that).

What it stops that the sandbox alone cannot: code of the package runs inside pytest's own
interpreter, so without the gate it could patch pytest's report, or return an object whose
``__eq__`` is always true. Exiting early, forged output and files outside the package's source
are stopped at run time as well (:mod:`~trainer.families.pkgs.verifier`).

>>> check("m.py", "def f(a, b):\\n    return a < b\\n", "def f(a, b):\\n    return a <= b\\n")
[]
>>> [r["what"] for r in check("m.py", "def f(a):\\n    return a\\n", "import os\\ndef f(a):\\n    os._exit(0)\\n")]
['new import: import os', 'new name: os', 'new attribute: _exit']
>>> check("m.py", "x = 1\\n", "x = (\\n")[0]["what"].startswith("does not parse")
True
>>> [r["line"] for r in check("m.py", "x = 1\\n", "x = 1\\nclass A:\\n    def __eq__(s, o): return True\\n")]
[3]
"""
from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from typing import Any

FORBIDDEN = frozenset({
    # ending the process or the run early
    "exit", "_exit", "quit", "kill", "killpg", "abort", "SystemExit", "KeyboardInterrupt", "GeneratorExit",
    "BaseException", "signal", "atexit", "faulthandler", "resource",
    # the interpreter, the test runner and their state
    "sys", "os", "posix", "nt", "modules", "_getframe", "settrace", "setprofile", "gettrace", "getprofile",
    "audit", "addaudithook", "gc", "ctypes", "_ctypes", "inspect", "builtins", "pytest", "_pytest", "unittest",
    "mock", "pluggy", "importlib", "runpy", "pkgutil", "sitecustomize", "usercustomize", "site", "threading",
    "_thread", "multiprocessing", "concurrent", "weakref", "f_back", "f_globals", "f_locals", "f_builtins",
    "f_code", "f_lineno", "f_trace", "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "co_code",
    "co_consts", "func_globals",
    # running other code, processes, the network
    "eval", "exec", "compile", "subprocess", "system", "popen", "spawn", "fork", "forkpty", "execl", "execle",
    "execlp", "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
    "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "pthread_kill", "dup2",
    "socket", "pickle", "marshal", "shutil", "tempfile", "environ", "getenv", "putenv",
    # objects by name
    "getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals", "dir", "breakpoint",
    "operator", "attrgetter", "methodcaller", "get_field", "locate", "resolve_name", "_resolve", "import_module",
    # code in strings, or loaded from a path
    "get_type_hints", "ForwardRef", "_evaluate", "_eval_type", "get_annotations", "timeit", "runsource", "runcode",
    "InteractiveInterpreter", "InteractiveConsole", "doctest", "pdb", "bdb", "cProfile", "runctx", "zipimport",
    "zipimporter", "load_module", "exec_module", "SourceFileLoader", "spec_from_file_location", "module_from_spec",
    "imp", "load_source", "load_compiled", "load_dynamic",
    # files
    "open", "io", "pathlib", "Path", "read_text", "read_bytes", "write_text", "write_bytes", "unlink",
    "rmtree", "chmod", "symlink", "fdopen", "stdout", "stderr", "stdin", "_io", "_pyio", "FileIO", "_socket",
    "fromfd", "mmap", "FileHandler", "WatchedFileHandler", "RotatingFileHandler", "TimedRotatingFileHandler",
    "dictConfig", "fileConfig", "_posixsubprocess",
    # objects that compare equal to anything, classes made at run time
    "type", "object", "super", "mro", "ANY", "NotImplemented", "classmethod", "staticmethod", "property",
})
"""Identifiers a fix of an operator, bound, condition, default or argument never adds."""
MAX_SOURCE_CHARS = 1_000_000
"""A longer changed file is refused unread."""
_DUNDER = re.compile(r"^__\w+__$")
_WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_KINDS = ("import", "definition", "parameter or keyword", "name", "attribute", "string", "special method")
_NAME_FIELDS = {"id": "name", "attr": "attribute", "name": "definition", "arg": "parameter or keyword"}


def refused(word: str) -> bool:
    """Whether the gate counts ``word`` (a dunder, or one of :data:`FORBIDDEN`).

    >>> refused("__eq__"), refused("_exit"), refused("lower"), refused("__"), refused("_private_")
    (True, True, False, False, False)
    """
    return word in FORBIDDEN or bool(_DUNDER.match(word))


def _chain(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """The dotted attribute chain ``node`` is part of (``os.path.join`` for the ``os`` in it),
    ``?`` standing for a base that is not a name; empty for what is not a name or attribute."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return ""
    top = node
    while isinstance(parents.get(top), ast.Attribute) and parents[top].value is top:
        top = parents[top]
    parts = []
    while isinstance(top, ast.Attribute):
        parts.append(top.attr)
        top = top.value
    parts.append(top.id if isinstance(top, ast.Name) else "?")
    return ".".join(reversed(parts))


def occurrences(tree: ast.AST) -> list[tuple[str, str, int, str, str]]:
    """Each counted thing in a parsed module as ``(kind, what, line, scope, chain)``: import
    statements (by their text; scope and chain empty: an import may move), and the refused
    identifiers (:func:`refused`) as names, attributes, definitions, parameters and keywords, and
    words of string constants, each with the dotted names of the classes and functions around it
    (``scope``) and, for a name or attribute, the attribute chain it is part of (``chain``)."""
    found: list[tuple[str, str, int, str, ast.AST | None]] = []
    parents: dict[ast.AST, ast.AST] = {}
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:  # iterative: a long expression nests deeper than Python's recursion
        node, scope = stack.pop()
        line = getattr(node, "lineno", 0)
        inner = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner = f"{scope}.{node.name}" if scope else node.name
        elif isinstance(node, ast.Lambda):
            inner = f"{scope}.<lambda>"
        for child in ast.iter_child_nodes(node):
            parents[child] = node
            stack.append((child, inner))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(("import", ast.unparse(node), line, "", None))
            continue
        if isinstance(node, ast.alias):  # part of an import statement, counted above
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            dotted = _DOTTED.match(text.strip()) is not None  # a name to look up, not prose
            for word in set(_WORDS.findall(text)):
                if _DUNDER.match(word) or (dotted and word in FORBIDDEN):
                    found.append(("string", word, line, scope, None))
            continue
        # every identifier the node holds: a name, attribute, definition, parameter, keyword, and
        # those of global/nonlocal, a match pattern's class keywords (``case C(__globals__=g)``
        # reads an attribute), captures and rest
        for field, value in ast.iter_fields(node):
            kind = _NAME_FIELDS.get(field, "name")
            for word in ([value] if isinstance(value, str) else value if isinstance(value, list) else []):
                if isinstance(word, str) and refused(word):
                    found.append((kind, word, line, scope, node if kind in ("name", "attribute") else None))
    # the chains need every parent, so they are read once the walk is done
    return [(kind, what, line, scope, _chain(node, parents) if node is not None else "")
            for kind, what, line, scope, node in found]


def features(tree: ast.AST) -> dict[tuple[str, str], list[int]]:
    """Each counted thing in a parsed module as ``(kind, what) -> [line of each occurrence]``
    (:func:`occurrences` without scopes and chains)."""
    found: dict[tuple[str, str], list[int]] = {}
    for kind, what, line, _, _ in occurrences(tree):
        found.setdefault((kind, what), []).append(line)
    return found


def _parse(text: str) -> tuple[ast.AST | None, str, int]:
    """(the module, '', 0), or (None, why, line) when it does not parse. Parsed as the bytes the
    sandbox writes, so that a coding declaration counts as it will when Python imports the file
    (``# coding: utf-7`` turns ``#+AAo-import os`` from a comment into a line of code).

    >>> [type(n).__name__ for n in _parse("# coding: utf-7\\nx = 1 #+AAo-import os\\n")[0].body]
    ['Assign', 'Import']
    """
    try:
        return ast.parse(text.encode("utf-8", "surrogatepass")), "", 0
    except SyntaxError as exc:
        return None, f"does not parse: {exc.msg}", exc.lineno or 0
    except (ValueError, LookupError, RecursionError, MemoryError) as exc:  # null bytes; a bad encoding; nested too deep
        return None, f"does not parse: {type(exc).__name__}", 0


COMPARING = frozenset({"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__",
                       "__contains__", "__instancecheck__", "__subclasscheck__", "__getattr__",
                       "__getattribute__", "__class_getitem__"})
"""The special methods that decide what an object compares, hashes or tests equal to, or what
its attributes are: the ways to an object that passes any ``==`` or ``isinstance`` assert."""


def _specials(tree: ast.AST | None) -> dict[str, tuple[int, str]]:
    """The file's :data:`COMPARING` methods and assignments (``Class.__eq__``), each as (line,
    its syntax tree dumped without positions)."""
    out: dict[str, tuple[int, str]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in COMPARING:
                out[prefix + node.name] = (node.lineno, ast.dump(node))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in COMPARING:
                        out[prefix + target.id] = (node.lineno, ast.dump(node))

    if tree is not None:
        walk(getattr(tree, "body", []), "")
    return out


def _functions(tree: ast.AST | None) -> dict[str, ast.AST]:
    """Every function of a module by qualified name (``Class.method``, ``f.inner``; the first of
    two with one name)."""
    out: dict[str, ast.AST] = {}
    stack: list[tuple[ast.AST, str]] = [(tree, "")] if tree is not None else []
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not isinstance(child, ast.ClassDef):
                    out.setdefault(prefix + child.name, child)
                stack.append((child, f"{prefix}{child.name}."))
            else:
                stack.append((child, prefix))
    return out


def compare_path(tree: ast.AST | None, names: frozenset[str] = frozenset()) -> set[str]:
    """The functions of the module a :data:`COMPARING` method reaches: named (called, passed or
    assigned as ``__eq__ = _eq``) by one, then by those, and so on (by name: over-approximated);
    ``names``: names the comparing methods of other files reach (a helper in another module).

    >>> code = "def _c(a, b):\\n    return _s(a) - _s(b)\\ndef _s(x):\\n    return x\\ndef other():\\n    pass\\n"
    >>> sorted(compare_path(ast.parse(code + "class V:\\n    def __lt__(s, o):\\n        return _c(s, o) < 0\\n")))
    ['V.__lt__', '_c', '_s']
    """
    funcs = _functions(tree)
    by_name: dict[str, list[str]] = {}
    for qualname in funcs:
        by_name.setdefault(qualname.rsplit(".", 1)[-1], []).append(qualname)
    roots: list[ast.AST] = [f for q, f in funcs.items() if q.rsplit(".", 1)[-1] in COMPARING | names]
    roots += [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id in COMPARING for t in n.targets)] if tree is not None else []
    seen = {q for q in funcs if q.rsplit(".", 1)[-1] in COMPARING | names}
    while roots:
        for node in ast.walk(roots.pop()):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            for qualname in by_name.get(name, ()):
                if qualname not in seen:
                    seen.add(qualname)
                    roots.append(funcs[qualname])
    return seen


@functools.lru_cache(maxsize=512)  # a package's files recur from task to task
def _names_compared(text: str) -> frozenset[str]:
    """The names the functions a comparing special method of ``text`` reaches refer to."""
    tree = _parse(text)[0]
    funcs = _functions(tree)
    return frozenset(n.id if isinstance(n, ast.Name) else n.attr for q in compare_path(tree) for n in ast.walk(funcs[q])
                     if isinstance(n, (ast.Name, ast.Attribute)))


def _is_test(path: str) -> bool:
    return any(p.startswith("test") or p == "conftest.py" for p in path.split("/"))


def _shape(node: ast.AST) -> str:
    """A function's syntax tree without its names, constants and operators: what a fix of a
    mutation (an operator, a constant, a bound, arguments swapped) leaves as it was."""
    return " ".join(type(n).__name__ for n in ast.walk(node)
                    if not isinstance(n, (ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.expr_context)))


def _reshaped(tree: ast.AST, before: list[ast.AST | None], names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, name) of each function a comparing method reaches that the change gave a new shape
    (or that is new): ``return 0`` for the body of a compare helper, an early return added."""
    olds = [_functions(b) for b in before if b is not None]
    out, reached = [], compare_path(tree, names)
    for qualname, node in sorted(_functions(tree).items()):
        if qualname not in reached or qualname.rsplit(".", 1)[-1] in COMPARING:
            continue
        known = [f[qualname] for f in olds if qualname in f]
        if any(ast.dump(k) == ast.dump(node) for k in known):
            continue
        if _shape(node) not in {_shape(k) for k in known}:
            out.append((node.lineno, qualname))
    return out


@functools.lru_cache(maxsize=64)  # the package's own files recur from task to task
def _counts(text: str | None) -> Counter:
    """How often each ``(kind, what, scope, chain)`` of :func:`occurrences` is in ``text``."""
    tree = _parse(text)[0] if text is not None else None
    return Counter(o[:2] + o[3:] for o in occurrences(tree)) if tree is not None else Counter()


def check(path: str, original: str | None, new: str, pristine: str | None = None, *,
          compared: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Why the gate refuses the change of ``path`` from ``original`` (None: a file the package
    did not have) to ``new``, as ``{"file", "line", "kind", "what"}`` records; empty when it
    passes. ``pristine`` is the file as the package's own sdist has it (trusted): what it has
    is allowed too, so that undoing a mutation that dropped code (``not in sys.modules``) passes."""
    if len(new) > MAX_SOURCE_CHARS:
        return [{"file": path, "line": 0, "kind": "size", "what": f"{len(new)} characters; at most {MAX_SOURCE_CHARS}"}]
    tree, why, line = _parse(new)
    if tree is None:
        return [{"file": path, "line": line, "kind": "syntax", "what": why}]
    old = _counts(original) | _counts(pristine)  # the larger count of each (a new Counter: the cached ones stay)
    old_lines = set((original or "").splitlines()) | set((pristine or "").splitlines())
    new_lines = new.splitlines()
    grouped: dict[tuple[str, str, str, str], list[int]] = {}
    for kind, what, line, scope, chain in occurrences(tree):
        grouped.setdefault((kind, what, scope, chain), []).append(line)
    out, said = [], set()
    for key, lines in grouped.items():
        kind, what = key[:2]
        if len(lines) <= old[key] or (kind, what) in said:
            continue
        # the first occurrence on a line the original does not have (else the first one past the
        # original's count)
        fresh = [n for n in lines if 0 < n <= len(new_lines) and new_lines[n - 1] not in old_lines]
        at = min(fresh) if fresh else sorted(lines)[old[key]]
        said.add((kind, what))
        out.append({"file": path, "line": at, "kind": kind, "what": f"new {kind}: {what}"})
    # A comparing special method (``__eq__``...) the file has may stay as it is or become the
    # package's own again, nothing else: rewriting one (an ``__eq__`` that says True) adds no
    # count above.
    trees = [_parse(text)[0] for text in (original, pristine) if text is not None]
    before = [_specials(t) for t in trees]
    for name, (at, dumped) in _specials(tree).items():
        if all(name not in known or known[name][1] != dumped for known in before) and any(name in known for known in before):
            out.append({"file": path, "line": at, "kind": "special method", "what": f"changed special method: {name}"})
    # Nor may a function such a method reaches get a new shape: only what a fix of a mutation
    # changes (an operator, a constant, a name) may change there.
    if any(before) or compared:
        for at, name in _reshaped(tree, trees, compared):
            out.append({"file": path, "line": at, "kind": "special method",
                        "what": f"reshaped function a comparing special method reaches: {name}"})
    return sorted(out, key=lambda r: (r["line"], _KINDS.index(r["kind"]), r["what"]))


def check_tree(base: dict[str, str], changed: dict[str, str], pristine: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The gate's refusals for every changed file (``changed``: path -> new text) against ``base``
    (and the package's own ``pristine`` files, see :func:`check`); a function named by what a
    comparing special method of any file of ``base`` reaches keeps its shape in every file."""
    compared = frozenset().union(*[_names_compared(text) for path, text in sorted(base.items())
                                   if path.endswith(".py") and not _is_test(path) and len(text) <= MAX_SOURCE_CHARS])
    return [r for path in sorted(changed)
            for r in check(path, base.get(path), changed[path], (pristine or {}).get(path), compared=compared)]
