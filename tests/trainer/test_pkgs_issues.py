"""swe-pkg issue text: written from the failing tests, never quoting a mutated line, each test's
code shown once (a parametrised test's other cases show their message only), and at level 3 the
two bugs' failures in one list that opens where they meet."""
from __future__ import annotations

from trainer.families.pkgs.issues import Failure, issue

CODE = "def test_x(v):\n    assert scale(v) == 2 * v"


def test_a_parametrised_tests_code_is_shown_once():
    failures = [Failure("t.py::test_x[1]", "E  assert 3 == 2", CODE), Failure("t.py::test_x[2]", "E  assert 5 == 4", CODE)]
    text = issue("demo", "1.0", 2, [failures], files=["demo/m.py"], seed=0, forbidden=[])
    assert text.count("assert scale(v) == 2 * v") == 1
    assert "assert 3 == 2" in text and "assert 5 == 4" in text
    assert "`t.py::test_x[2]` (the same test with other parameters) fails" in text
    assert "demo/m.py" not in text  # level 2 does not name the file


def test_level_3_says_two_interacting_bugs_and_quotes_no_mutated_line():
    failures = [Failure("t.py::test_both", "E  assert total(2) == 4\nE   where x = a - b", "def test_both():\n    assert total(2) == 4"),
                Failure("t.py::test_a", "E  assert 1 == 0", "")]
    text = issue("demo", "1.0", 3, [failures], files=["demo/a.py", "demo/b.py"], seed=1, forbidden=["x = a - b"])
    assert text.startswith("Bugs in demo 1.0: t.py::test_both fails")
    assert "two bugs in two different files" in text and "fixing one of them alone is not enough" in text
    assert "a - b" not in text and "demo/a.py" not in text and "demo/b.py" not in text
