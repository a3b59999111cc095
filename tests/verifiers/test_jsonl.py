"""JSONL uploads: every bad line is reported with its number and field, and nothing is imported."""
from __future__ import annotations

import json

import pytest

from trainer.catalogue.jsonl import JSONLError, UploadedSource, parse_jsonl
from trainer.outcomes import Outcome
from trainer.verifiers import run_cascade

GOOD = [
    {"prompt": "What is 2+2?", "answer": "4"},
    {"prompt": "Capital of France?", "answer": "Paris", "metadata": {"source": "quiz"}},
    {"prompt": "Write add(a, b).", "tests": ["assert add(1, 2) == 3"], "metadata": {"entry_point": "add"}},
]


def lines(rows):
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"


def test_good_upload_parses_into_tasks():
    tasks = parse_jsonl(lines(GOOD).encode(), domain="my-upload")
    assert [t.id for t in tasks] == ["1", "2", "3"]
    assert tasks[1].meta == {"source": "quiz"}
    assert tasks[2].answer["tests"] == ["assert add(1, 2) == 3"] and tasks[2].answer["entry_point"] == "add"
    assert run_cascade({"stages": [{"type": "exact"}]}, "paris", tasks[1]).outcome is Outcome.PASS


def test_one_broken_line_refuses_the_whole_upload_with_its_number():
    rows = list(GOOD)
    rows.insert(2, {"prompt": "Missing its answer"})
    with pytest.raises(JSONLError) as info:
        parse_jsonl(lines(rows))
    assert info.value.errors == [(3, "answer", "required (or tests)")]
    assert "line 3: answer: required" in str(info.value)


def test_every_bad_line_is_listed():
    rows = [GOOD[0], "{not json", {"answer": "1"}, {"prompt": "", "answer": "x", "level": -1},
            {"prompt": "p", "answer": "a", "metadata": [1], "colour": "red"}, GOOD[1], {"prompt": "dup", "answer": "1", "id": "6"}]
    with pytest.raises(JSONLError) as info:
        parse_jsonl(lines(rows))
    got = [(n, f) for n, f, _ in info.value.errors]
    assert got == [(2, ""), (3, "prompt"), (4, "level"), (4, "prompt"), (5, "colour"), (5, "metadata"), (7, "id")]


def test_code_cascade_requires_tests_and_a_bad_cascade_is_reported():
    with pytest.raises(JSONLError) as info:
        parse_jsonl(lines(GOOD), verifier={"stages": [{"type": "code_tests"}]})
    assert [(n, f) for n, f, _ in info.value.errors] == [(1, "tests"), (2, "tests")]
    with pytest.raises(JSONLError) as info:
        parse_jsonl(lines(GOOD[:2]), verifier={"stages": [{"type": "nope"}]})
    assert info.value.errors == [(0, "verifier.stages[0].type", "unknown stage type 'nope'")]


def test_empty_and_non_utf8_uploads_are_refused():
    with pytest.raises(JSONLError):
        parse_jsonl("\n\n")
    with pytest.raises(JSONLError) as info:
        parse_jsonl(b'{"prompt": "a", "answer": "b"}\n\xff\xfe\n')
    assert info.value.errors[0][0] == 2


def test_uploaded_source_is_deterministic():
    import random

    source = UploadedSource("my-upload", parse_jsonl(lines(GOOD)))
    assert [source.sample(random.Random(3)).id for _ in range(3)] == [source.sample(random.Random(3)).id] * 3
