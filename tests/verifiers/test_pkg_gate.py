"""The swe-pkg static gate (trainer/families/pkgs/gate.py), without a sandbox: real bug fixes pass,
and every change that adds a way around the tests is refused with its file, line and reason."""
from __future__ import annotations

import textwrap

import pytest

from trainer.families.pkgs.gate import FORBIDDEN, check, check_tree, refused

ORIGINAL = textwrap.dedent('''\
    """A small module, as a package has them."""
    import re

    _WORD = re.compile(r"\\w+")


    class Box:
        """A value in a box."""

        def __init__(self, value, limit=10):
            self.value = value
            self.limit = limit

        def __eq__(self, other):
            return isinstance(other, Box) and other.value == self.value

        def fits(self, n):
            return 0 <= n < self.limit


    def clamp(value, low=0, high=100):
        if value < low:
            return low
        if value > high and high is not None:
            return high
        return value


    def words(text, limit=None):
        found = _WORD.findall(text)
        return found[:limit] if limit is not None else found


    def pad(text, width, fill=" "):
        return text.rjust(width, fill)
''')


def mutate(old: str, new: str, source: str = ORIGINAL) -> str:
    assert source.count(old) == 1, old
    return source.replace(old, new)


# (the mutant, the fix), each fix a change a real bug fix makes: the original restored, or an
# equivalent rewrite of the same line with nothing new.
FIXES = {
    "operator restored": ("if value < low:", "if value <= low:"),
    "bound restored": ("return 0 <= n < self.limit", "return 0 <= n <= self.limit"),
    "condition restored": ("if value > high and high is not None:", "if value > high:"),
    "negation restored": ("limit is not None else", "limit is None else"),
    "default restored": ("limit=10):", "limit=11):"),
    "arguments restored": ("text.rjust(width, fill)", "text.rjust(fill, width)"),
    "slice restored": ("found[:limit]", "found[:limit + 1]"),
    "string default restored": ('fill=" "', 'fill="_"'),
}


@pytest.mark.parametrize("name", sorted(FIXES))
def test_a_real_fix_passes_the_gate(name):
    right, wrong = FIXES[name]
    mutant = mutate(right, wrong)
    assert check("pkg/m.py", mutant, ORIGINAL) == []  # the fix: the mutant back to the original


@pytest.mark.parametrize("fix", [
    "    if value < low or value != value:\n        return low\n",  # nan handled; new ordinary names are fine
    "    lowest = min(low, high)\n    if value < lowest:\n        return lowest\n",
    "    if isinstance(value, str):\n        raise TypeError('value: not a number')\n    if value < low:\n        return low\n",
])
def test_a_rewrite_with_ordinary_code_passes(fix):
    fixed = mutate("    if value < low:\n        return low\n", fix)
    assert check("pkg/m.py", ORIGINAL, fixed) == []


def test_what_the_original_has_may_stay_or_move_but_not_grow():
    """``__eq__`` and ``import re`` are the original's: kept or moved they pass; one more refuses."""
    moved = ORIGINAL.replace("import re\n", "") .replace('"""A small module, as a package has them."""\n',
                                                          '"""A small module, as a package has them."""\nimport re\n')
    assert check("pkg/m.py", ORIGINAL, moved) == []
    more = ORIGINAL + "\n\nclass Other:\n    def __eq__(self, other):\n        return True\n"
    [refusal] = check("pkg/m.py", ORIGINAL, more)
    assert refusal == {"file": "pkg/m.py", "line": 39, "kind": "definition", "what": "new definition: __eq__"}


ATTACKS = {
    "always-equal object": ("    return value\n",
                            "    class A:\n        def __eq__(self, o):\n            return True\n    return A()\n",
                            {"new definition: __eq__"}),
    "always-equal via type()": ("    return value\n",
                                "    return type('A', (), {'__eq__': lambda s, o: True})()\n",
                                {"new name: type", "new string: __eq__"}),
    "sys.exit in the function": ("    return value\n", "    sys.exit(0)\n", {"new name: sys", "new attribute: exit"}),
    "exit builtin": ("    return value\n", "    exit(0)\n", {"new name: exit"}),
    "raise SystemExit": ("    return value\n", "    raise SystemExit(0)\n", {"new name: SystemExit"}),
    "os._exit by import": ("import re\n", "import re\nimport os\nos._exit(0)\n",
                           {"new import: import os", "new name: os", "new attribute: _exit"}),
    "__import__": ("    return value\n", "    __import__('os')._exit(0)\n", {"new name: __import__", "new attribute: _exit", "new string: os"}),
    "builtins by attribute": ("    return value\n", "    return re.__builtins__\n", {"new attribute: __builtins__"}),
    "report patched": ("import re\n", "import re\nimport _pytest.reports\n_pytest.reports.TestReport.outcome = 'passed'\n",
                       {"new import: import _pytest.reports", "new name: _pytest"}),
    "pytest by string": ("    return value\n", "    return re.__class__('_pytest.reports')\n",
                         {"new attribute: __class__", "new string: _pytest"}),
    "frame walk": ("    return value\n", "    return re.compile.__globals__['sys']._getframe(1).f_back\n",
                   {"new attribute: __globals__", "new attribute: compile", "new attribute: _getframe", "new attribute: f_back",
                    "new string: sys"}),
    "getattr by name": ("    return value\n", "    return getattr(re, 'mod' + 'ules')\n", {"new name: getattr"}),
    "eval": ("    return value\n", "    return eval('1')\n", {"new name: eval"}),
    "open a test file": ("    return value\n", "    return open('tests/test_m.py').read()\n", {"new name: open"}),
    "a function named exit": ("def words(", "def exit():\n    pass\n\n\ndef words(", {"new definition: exit"}),
    "a keyword named object": ("return text.rjust(width, fill)", "return text.rjust(width, fill, object=1)",
                               {"new parameter or keyword: object"}),
    "globals": ("    return value\n", "    globals()['clamp'] = None\n", {"new name: globals"}),
    "gc": ("    return value\n", "    return gc.get_objects()\n", {"new name: gc"}),
    "super": ("        self.value = value\n", "        super().__init__()\n        self.value = value\n",
              {"new name: super", "new attribute: __init__"}),
    "from import": ("import re\n", "import re\nfrom re import compile as c\n", {"new import: from re import compile as c"}),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_attack_is_refused_with_what_and_where(name):
    old, new, whats = ATTACKS[name]
    attacked = mutate(old, new)
    refusals = check("pkg/m.py", ORIGINAL, attacked)
    assert {r["what"] for r in refusals} == whats, refusals
    lines = attacked.splitlines()
    for r in refusals:
        assert r["file"] == "pkg/m.py" and lines[r["line"] - 1] not in ORIGINAL.splitlines(), r


def test_prose_in_strings_is_not_read_but_a_dunder_is():
    prose = ORIGINAL + "\n\ndef f():\n    raise ValueError('the type of object to exit')\n"
    assert check("pkg/m.py", ORIGINAL, prose) == []
    dunder = ORIGINAL + "\n\ndef f():\n    raise ValueError('see __class__')\n"
    assert [r["what"] for r in check("pkg/m.py", ORIGINAL, dunder)] == ["new string: __class__"]


@pytest.mark.parametrize("text, line", [("def f(:\n", 1), ("x = 1\n  y = 2\n", 2), ("x = '\0'\0\n", 0),
                                        ("(" * 500 + ")" * 500 + "\n", 1)])
def test_a_file_that_does_not_parse_is_refused(text, line):
    [refusal] = check("pkg/m.py", ORIGINAL, text)
    assert refusal["kind"] == "syntax" and refusal["what"].startswith("does not parse"), refusal
    assert refusal["line"] == line


def test_a_huge_file_is_refused_unread():
    [refusal] = check("pkg/m.py", ORIGINAL, "x = 1\n" * 200_000)
    assert refusal["kind"] == "size"


def test_an_original_that_does_not_parse_counts_nothing():
    """A Python 2 file of the package: its own identifiers do not count as allowed."""
    assert [r["what"] for r in check("pkg/old.py", "print 'x'\nimport os\n", "import os\n")] == ["new import: import os"]
    assert check("pkg/old.py", "print 'x'\n", "x = 1\n") == []


def test_check_tree_reports_every_file_in_order():
    base = {"pkg/a.py": "x = 1\n", "pkg/b.py": "y = 2\n"}
    changed = {"pkg/b.py": "import os\n", "pkg/a.py": "x = (\n", "pkg/new.py": "eval('1')\n"}
    assert [(r["file"], r["kind"]) for r in check_tree(base, changed)] == [
        ("pkg/a.py", "syntax"), ("pkg/b.py", "import"), ("pkg/new.py", "name")]


def test_the_list_holds_what_the_issue_names():
    for word in ("exit", "_exit", "kill", "abort", "modules", "_getframe", "settrace", "setprofile", "gc", "ctypes",
                 "inspect", "builtins", "pytest", "_pytest", "unittest", "subprocess", "signal", "atexit", "os", "sys",
                 "eval", "exec", "compile", "getattr", "setattr", "delattr", "vars", "globals", "locals", "open",
                 "breakpoint", "type", "object", "super"):
        assert word in FORBIDDEN and refused(word)
    for word in ("__eq__", "__class__", "__globals__", "__import__", "__builtins__", "__file__"):
        assert refused(word) and word not in FORBIDDEN


def test_undoing_a_dropped_condition_that_used_a_listed_name_passes_with_the_pristine_file():
    """A mutation may drop code the gate lists (``not in sys.modules``, as in boltons' typeutils):
    the fix puts it back, which the starting file alone would refuse; the package's own file allows it."""
    pristine = "import sys\n\n\ndef loaded(module):\n    return not module or module not in sys.modules\n"
    mutant = pristine.replace(" or module not in sys.modules", "")
    assert [r["what"] for r in check("pkg/t.py", mutant, pristine)] == ["new name: sys", "new attribute: modules"]
    assert check("pkg/t.py", mutant, pristine, pristine) == []
    assert check_tree({"pkg/t.py": mutant}, {"pkg/t.py": pristine}, {"pkg/t.py": pristine}) == []
    more = pristine + "\n\ndef out():\n    sys.exit(0)\n"
    assert [r["what"] for r in check("pkg/t.py", mutant, more, pristine)] == ["new name: sys", "new attribute: exit"]



def test_every_built_tasks_reference_passes_the_gate():
    """The reference of committed swe-pkg tasks (their mutations undone; the first 4 tasks of each
    level of each package) passes the gate: no real fix is refused."""
    from trainer.families.pkgs import pins, tasks

    checked = 0
    for name in tasks.package_names():
        original = pins.source_tree(name)
        built = tasks.load(name).tasks
        for record in [r for level in (1, 2, 3) for r in [t for t in built if t["level"] == level][:4]]:
            start = tasks.starting_tree(name, record)
            fixed = {path: original[path] for path in record["files"]}
            assert check_tree(start, fixed, original) == [], record["id"]
            checked += 1
    assert checked >= 20


def test_a_special_method_the_file_has_may_not_be_rewritten_only_put_back():
    from trainer.families.pkgs.gate import check

    pristine = ("class A:\n    def __init__(self, x):\n        self.x = x\n    def __eq__(self, other):\n"
                "        return self.x == other.x\n    __hash__ = None\ndef f(a):\n    return a + 1\n")
    assert check("m.py", pristine, pristine.replace("self.x = x", "self.x = x + 0"), pristine) == []  # __init__ is not comparing
    start = pristine.replace("self.x == other.x", "self.x != other.x")  # the task's bug in __eq__
    always = pristine.replace("return self.x == other.x", "return True").replace("return a + 1", "return A(a)")
    assert [r["what"] for r in check("m.py", pristine, always, pristine)] == ["changed special method: A.__eq__"]
    assert check("m.py", start, pristine, pristine) == []  # the reference puts the package's own back
    assigned = pristine.replace("__hash__ = None", "__hash__ = object.__hash__")
    assert "changed special method: A.__hash__" in [r["what"] for r in check("m.py", pristine, assigned, pristine)]
