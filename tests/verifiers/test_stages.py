"""Each verifier family on its own, the stage registry and cascade validation."""
from __future__ import annotations

import subprocess
import sys

import pytest

from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers import STAGES, cascade_json_schema, validate_cascade
from trainer.verifiers.cascade import CascadeError, compile_cascade, run_cascade
from trainer.verifiers.choice import multiple_choice
from trainer.verifiers.code import code_tests
from trainer.verifiers.context import NO_CONTEXT, VerifyContext
from trainer.verifiers.exact import exact_match
from trainer.verifiers.extract import extract_answer
from trainer.verifiers.format_length import format_check, length_check
from trainer.verifiers.json_checks import json_fields, json_schema
from trainer.verifiers.judge import JudgeResult, judge_stage
from trainer.verifiers.math_equiv import math_equivalence
from trainer.verifiers.numeric import numeric_match
from trainer.verifiers.regex import regex_match


def task(answer=None, **meta):
    return Task("test", "1", "q", answer=answer, meta=meta)


@pytest.mark.parametrize("completion, outcome", [
    ("42", Outcome.PASS), (" 42 \n", Outcome.PASS), ("43", Outcome.FAIL), ("forty-two", Outcome.FAIL),
])
def test_exact(completion, outcome):
    assert exact_match(completion, task("42")).outcome is outcome


@pytest.mark.parametrize("completion, kwargs, outcome", [
    ("100.4", {"abs_tol": 0.5}, Outcome.PASS),
    ("100.6", {"abs_tol": 0.5}, Outcome.FAIL),
    ("101", {"rel_tol": 0.01}, Outcome.PASS),
    ("102", {"rel_tol": 0.01}, Outcome.FAIL),
    ("1e2", {}, Outcome.PASS),
    ("100%", {}, Outcome.FAIL),
    ("a hundred", {}, Outcome.PARSE_ERROR),
])
def test_numeric_tolerances(completion, kwargs, outcome):
    assert numeric_match(completion, task(100), **kwargs).outcome is outcome


def test_regex_and_choice_and_extract():
    assert regex_match("id: AB-1234", task(), pattern=r"[A-Z]{2}-\d{4}", mode="search").outcome is Outcome.PASS
    assert regex_match("id: AB-1234", task(), pattern=r"[A-Z]{2}-\d{4}").outcome is Outcome.FAIL  # anchored by default
    assert regex_match("AB-1234", task(), pattern=r"[A-Z]{2}-\d{4}").outcome is Outcome.PASS
    assert regex_match("id: AB-12", task(), pattern=r"[A-Z]{2}-\d{4}", mode="search").outcome is Outcome.FAIL
    t = task("C", choices=["red", "green", "blue"])
    assert multiple_choice("(C)", t).outcome is Outcome.PASS
    assert multiple_choice("blue", t).outcome is Outcome.PASS
    assert multiple_choice("green", t).outcome is Outcome.FAIL
    assert extract_answer("x \\boxed{\\frac{1}{2}} y <answer>7</answer>", task(), methods=["boxed"]).details["extracted"] == "\\frac{1}{2}"
    assert extract_answer("x", task(), methods=["boxed", "answer_tag"]).outcome is Outcome.PARSE_ERROR


def test_json_schema_and_fields():
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    assert json_schema('{"a": 1}', task(), schema=schema).outcome is Outcome.PASS
    assert json_schema('{"a": "1"}', task(), schema=schema).outcome is Outcome.FAIL
    assert json_schema('not json', task(), schema=schema).outcome is Outcome.PARSE_ERROR
    t = task({"x": 10.0, "y": "ok", "z": 3})
    assert json_fields('{"x": 10.4, "y": "OK", "z": 3}', t, tolerances={"x": {"abs": 0.5}}).outcome is Outcome.PASS
    partial = json_fields('{"x": 11, "y": "ok", "z": 3}', t, tolerances={"x": {"abs": 0.5}})
    assert partial.outcome is Outcome.PARTIAL and partial.score == pytest.approx(2 / 3)
    assert json_fields('{"x": 11, "y": "ok", "z": 3}', t, partial_credit=False).outcome is Outcome.FAIL


@pytest.mark.parametrize("completion, outcome", [
    ("\\boxed{\\frac{2}{4}}", Outcome.PASS),
    ("\\boxed{0.5}", Outcome.PASS),
    ("$\\boxed{x^2 + 2x + 1}$", Outcome.FAIL),
])
def test_math_equivalence(completion, outcome):
    assert math_equivalence(completion, task("\\frac{1}{2}")).outcome is outcome
    assert math_equivalence("$\\boxed{(x+1)^2}$", task("x^2 + 2x + 1")).outcome is Outcome.PASS


def test_format_length_and_judge():
    assert format_check("<think>a</think><answer>b</answer>", task(), required_tags=["think"]).outcome is Outcome.PASS
    assert format_check("<answer>b</answer>", task(), required_tags=["think"]).outcome is Outcome.FAIL
    assert length_check("a " * 100, task(), max_words=50).outcome is Outcome.FAIL
    assert judge_stage("x", task()).outcome is Outcome.JUDGE_ERROR
    assert judge_stage("x", task()).reward is None  # infrastructure: masked, never 0
    low = VerifyContext.with_judges({"default": lambda request: JudgeResult(0.2)})
    assert judge_stage("x", task(), threshold=0.5, context=low).outcome is Outcome.FAIL
    broken = VerifyContext.with_judges({"default": lambda request: 1 / 0})
    assert judge_stage("x", task(), context=broken).outcome is Outcome.JUDGE_ERROR


class FakeVerdict:
    """A sandbox verdict as the sandbox runtime returns it (only the fields the mapping reads)."""

    def __init__(self, status, stdout="", stderr=""):
        self.status, self.stdout, self.stderr, self.tests = status, stdout, stderr, []


@pytest.mark.parametrize("status, outcome", [
    ("timeout_cpu", Outcome.TIMEOUT), ("timeout_wall", Outcome.TIMEOUT), ("memory_limit", Outcome.MEMORY_LIMIT),
    ("output_limit", Outcome.OUTPUT_LIMIT), ("runtime_error", Outcome.RUNTIME_ERROR), ("sandbox_error", Outcome.SANDBOX_ERROR),
    ("something_new", Outcome.SANDBOX_ERROR),
])
def test_code_status_mapping(status, outcome):
    context = VerifyContext(execute=lambda files, command, limits=None, stdin=None, **kw: FakeVerdict(status))
    assert code_tests("def f(): pass", task({"tests": ["assert f() is None"]}), context=context).outcome is outcome


def test_a_sandbox_stage_reads_its_limits_only_when_a_job_runs():
    """A sandbox stage's limits (over its defaults) reach the sandbox when a job runs; a completion
    refused before any job (two code blocks) is refused as a parse error whatever they say."""
    from trainer.verifiers.cad import DEFAULT_LIMITS, cad_mesh

    asked = []

    def executor(files, command, limits=None, stdin=None, **kw):
        asked.append(limits)
        return FakeVerdict("runtime_error")

    cad = Task("cad-box", "1", "model a box", meta={"checks": []})
    v = cad_mesh("```python\nresult = 1\n```", cad, limits={"pids": 32}, context=VerifyContext(execute=executor))
    assert v.outcome is Outcome.RUNTIME_ERROR
    assert (asked[0].pids, asked[0].memory_mb) == (32, DEFAULT_LIMITS["memory_mb"])
    two = cad_mesh("```python\nresult = 1\n```\n```python\nresult = 2\n```", cad, limits={"memory_mb": 1},
                   context=VerifyContext(execute=executor))
    assert two.outcome is Outcome.PARSE_ERROR and len(asked) == 1


def test_code_needs_markers_with_this_jobs_nonce():
    """Status ok is not enough: the harness's markers, with the job's nonce, must report every test passed."""
    def executor(files, command, limits=None, stdin=None, **kw):
        forged = "".join(f"\n@@TEMPER-TEST {'0' * 32} {i} PASS \n" for i in range(3))  # not this job's nonce
        return FakeVerdict("ok", stdout=forged)

    v = code_tests("print('@@TEMPER-TEST ...')", task({"tests": ["assert True"]}), context=VerifyContext(execute=executor))
    assert v.outcome is Outcome.FAIL and v.reward == 0.0
    down = VerifyContext(execute=lambda *a, **k: (_ for _ in ()).throw(ConnectionError("engine down")))
    v = code_tests("x", task({"tests": ["assert True"]}), context=down)
    assert v.outcome is Outcome.SANDBOX_ERROR and v.reward is None


def test_code_limits_reach_the_sandbox_typed_behind_the_domain_slot():
    """A stage's params.limits arrive as Limits (a dict once reached the sandbox and every item
    was sandbox_error under a concurrency quota), inside the domain's sandbox slot."""
    from contextlib import contextmanager

    from trainer.verifiers.limits import Limits

    seen = []

    @contextmanager
    def slot(domain, limits):
        seen.append(("slot", domain, limits))
        yield

    def execute(files, command, limits, stdin=None, **kw):
        seen.append(("run", kw["domain"], limits))
        return FakeVerdict("timeout_cpu")

    context = VerifyContext(execute=execute, sandbox_slot=slot)
    v = code_tests("x", task({"tests": ["assert True"]}), limits={"cpu_s": 2, "memory_mb": 128}, context=context)
    assert v.outcome is Outcome.TIMEOUT
    assert [kind for kind, _, _ in seen] == ["slot", "run"]
    assert all(isinstance(limits, Limits) and limits.memory_mb == 128 and limits.cpu_s == 2 for _, _, limits in seen)
    assert validate_cascade({"stages": [{"type": "code_tests", "params": {"limits": {"memory_mb": 1}}}]}) == [
        ("verifier.stages[0].params.limits.memory_mb", "must be at least 16")]


def test_validate_cascade_paths_and_messages():
    spec = {"stages": [
        {"type": "extract", "params": {"methods": ["boxed", "nope"]}},
        {"type": "numeric", "timeout_s": -1, "params": {"abs_tol": -0.1}},
        {"type": "foo"},
        {"type": "regex", "params": {"pattern": "("}, "stop_on": ["pass", "maybe"], "extra": 1},
    ], "other": True}
    errors = dict(validate_cascade(spec))
    assert errors["verifier.other"] == "unknown key"
    assert errors["verifier.stages[0].params.methods[1]"] == "must be one of: boxed, answer_tag, final_line"
    assert errors["verifier.stages[1].timeout_s"] == "must be greater than 0"
    assert errors["verifier.stages[1].params.abs_tol"] == "must be at least 0"
    assert errors["verifier.stages[2].type"] == "unknown stage type 'foo'"
    assert errors["verifier.stages[3].params.pattern"].startswith("is not a valid regular expression")
    assert errors["verifier.stages[3].stop_on[1]"].startswith("must be one of: pass, fail")
    assert errors["verifier.stages[3].extra"] == "unknown key"
    assert validate_cascade({"stages": []}) == [("verifier.stages", "must be a non-empty list")]
    with pytest.raises(CascadeError) as info:
        compile_cascade({"stages": [{"type": "foo"}]}, NO_CONTEXT)
    assert info.value.errors == [("verifier.stages[0].type", "unknown stage type 'foo'")]


@pytest.mark.parametrize("stage,path,message", [
    ({"type": "code_tests", "params": {"backend": "none"}}, "params.backend", "must be one of: bwrap, bwrap-cold, docker, null"),
    ({"type": "code_tests", "params": {"backend": "../../bin/sh"}}, "params.backend", "must be one of"),
    ({"type": "environment", "params": {"env": "/etc/passwd"}}, "params.env", "unknown environment '/etc/passwd'"),
    ({"type": "environment", "params": {"env": "os:system"}}, "params.env", "unknown environment"),
    ({"type": "rg_score", "params": {"dataset": "/etc/passwd"}}, "params.dataset", "unknown reasoning-gym generator"),
    ({"type": "json_schema", "params": {"schema": {"type": 5}}}, "params.schema.type", "not a valid JSON Schema"),
    ({"type": "json_schema", "params": {"schema": {"$ref": "http://127.0.0.1:9/x"}}}, "params.schema.$ref", "must refer inside"),
    ({"type": "json_schema", "params": {"schema": {"properties": {"a": {"$ref": "file:///etc/passwd"}}}}},
     "params.schema.properties.a.$ref", "must refer inside"),
    ({"type": "math", "params": {"float_rounding": 2**70}}, "params.float_rounding", "must be at most 20"),
    ({"type": "length", "params": {"max_chars": 10**12}}, "params.max_chars", "must be at most 100000000"),
])
def test_stage_params_a_schema_alone_let_through_are_refused(stage, path, message):
    """Found by an attacker's pass: each was saved and failed only on the worker (an unknown
    backend or environment a ValueError/KeyError at verify time), or named something outside."""
    errors = validate_cascade({"stages": [stage]})
    assert [p for p, _ in errors] == [f"verifier.stages[0].{path}"], errors
    assert message in errors[0][1]


@pytest.mark.parametrize("stage", [
    {"type": "code_tests", "params": {"backend": "docker"}}, {"type": "code_tests", "params": {"backend": None}},
    {"type": "environment", "params": {"env": "calculator_kv"}}, {"type": "rg_score", "params": {"dataset": "gcd"}},
    {"type": "json_schema", "params": {"schema": {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}}},
    {"type": "math", "params": {"float_rounding": 6}},
])
def test_stage_params_within_the_rules_pass(stage):
    assert validate_cascade({"stages": [stage]}) == []


def test_the_sandbox_refuses_the_backends_a_stage_may_not_name():
    from workers.sandbox import PoolConfig, _make_backend

    with pytest.raises(ValueError, match="expected bwrap, bwrap-cold, docker"):
        _make_backend("none", PoolConfig())


def test_every_stage_type_has_an_importable_function_and_schema():
    schema = cascade_json_schema()
    assert len(schema["properties"]["stages"]["items"]["oneOf"]) == len(STAGES)
    for stage in STAGES.values():
        assert callable(stage.fn), stage.name
        assert stage.params_schema["type"] == "object"
        assert validate_cascade({"stages": [{"type": stage.name}]}) == []


def test_validation_imports_no_heavy_dependency():
    code = (
        "import sys, trainer.verifiers as v\n"
        "v.validate_cascade({'stages': [{'type': 'math'}, {'type': 'rg_score'}, {'type': 'code_tests'}]})\n"
        "v.cascade_json_schema()\n"
        "heavy = [m for m in ('torch', 'sympy', 'math_verify', 'reasoning_gym', 'jsonschema', 'numpy', 'workers') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=str(__import__("conftest").ROOT))
    assert out.stdout.strip() == "[]"


def test_cascade_cheap_first_and_stops_at_decisive_stage():
    spec = {"stages": [{"type": "math"}, {"type": "exact"}, {"type": "extract", "params": {"methods": ["boxed"]}}]}
    t = task("3")
    v = run_cascade(spec, "so \\boxed{3}", t)
    assert v.outcome is Outcome.PASS
    assert [s["stage"] for s in v.details["stages"]] == ["extract", "exact"]  # math never ran
    v = run_cascade(spec, "so \\boxed{\\frac{6}{2}}", t)
    assert v.outcome is Outcome.PASS and v.details["stage"] == "math"
    v = run_cascade(spec, "so \\boxed{6/2}", t)  # "X/Y" for a whole number reads as two answers
    assert v.outcome is Outcome.FAIL and v.details["stage"] == "extract"
    v = run_cascade(spec, "so \\boxed{4}", t)
    assert v.outcome is Outcome.FAIL and [s["stage"] for s in v.details["stages"]] == ["extract", "exact", "math"]
    v = run_cascade(spec, "no box", t)
    assert v.outcome is Outcome.PARSE_ERROR and len(v.details["stages"]) == 1
    gate = {"stages": [{"type": "length", "params": {"max_chars": 5}}, {"type": "exact"}]}
    assert run_cascade(gate, "3" * 10, t).details["stage"] == "length"
    stop = {"stages": [{"type": "exact", "stop_on": ["pass", "fail"]}, {"type": "numeric"}]}
    assert run_cascade(stop, "3.0", t).outcome is Outcome.FAIL
    assert run_cascade({"stages": [{"type": "exact"}, {"type": "numeric"}]}, "3.0", t).outcome is Outcome.PASS
