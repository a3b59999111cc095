"""Which kept mutants a swe-pkg build tries as level-3 pairs, and when a pair's bugs interact
(no sandbox: the kept mutants' fail-to-pass tests are given)."""
from __future__ import annotations

from trainer.families.pkgs.build import Kept, interaction, pair_candidates

TREE = {
    "pkg/a.py": "from pkg.b import helper\n\ndef outer(x):\n    return helper(x) + 1\n\ndef alone(x):\n    return x\n",
    "pkg/b.py": "def helper(x):\n    return x * 2\n\ndef other(x):\n    return -x\n",
}


def bug(index: int, path: str, line: int, f2p: list[str]) -> Kept:
    return Kept(index, {path: TREE[path]}, [{"file": path, "line": line, "kind": "op", "original": "", "replacement": ""}], f2p, {})


def test_shared_failures_first_then_files_that_name_the_others_function_never_one_file():
    outer, alone = bug(0, "pkg/a.py", 4, ["t::outer"]), bug(1, "pkg/a.py", 7, ["t::alone", "t::both"])
    helper, other = bug(2, "pkg/b.py", 2, ["t::helper"]), bug(3, "pkg/b.py", 5, ["t::other", "t::both"])
    pairs = [(a.index, b.index) for a, b in pair_candidates([outer, alone, helper, other], TREE, 10)]
    # alone+other share t::both; a.py imports and calls helper (outer's and alone's file); b.py names
    # neither outer nor alone, so other pairs with nothing of a.py but through t::both
    assert pairs == [(1, 3), (0, 2), (1, 2)]
    assert [(a.index, b.index) for a, b in pair_candidates([outer, alone, helper, other], TREE, 1)] == [(1, 3)]


def test_a_mutant_is_in_at_most_max_uses_pairs():
    shared = [bug(i, "pkg/a.py" if i % 2 else "pkg/b.py", 4 if i % 2 else 2, ["t::same"]) for i in range(6)]
    pairs = pair_candidates(shared, TREE, 100, max_uses=1)
    used = [k.index for a, b in pairs for k in (a, b)]
    assert len(pairs) == 3 and len(used) == len(set(used))


def test_interaction_kinds():
    a, b = bug(0, "pkg/a.py", 4, ["t1", "t2"]), bug(1, "pkg/b.py", 2, ["t3"])
    assert interaction(a, b, ["t1", "t2", "t3"]) == {"shared": [], "together": [], "masked": []}  # independent
    assert interaction(a, b, ["t1", "t2", "t3", "t4"])["together"] == ["t4"]
    assert interaction(a, b, ["t1", "t3"])["masked"] == ["t2"]
    assert interaction(a, bug(1, "pkg/b.py", 2, ["t2"]), ["t1", "t2"])["shared"] == ["t2"]
