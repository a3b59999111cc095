"""Reward integrity: one final answer per completion, hedges fail, non-finite numbers never match,
equal forms of a math answer pass, constant answers do not beat chance, partial credit does not
pay for what the prompt gives, and the regex stage is anchored and literal.

Each test names the class of hole it closes (issue 14, items 2-5, and the shared rule).
"""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from trainer.catalogue import documents
from trainer.catalogue.math_gen import equivalent_forms, wrong_forms
from trainer.families.references import reference_completion
from trainer.environments.calculator_kv import CalculatorKVEnv
from trainer.environments.filesystem import FileSystemEnv
from trainer.outcomes import Outcome
from trainer.catalogue import all_domains
from trainer.tasks.base import Task
from trainer.verifiers.answers import final_answers, hedge_reason, one_final_answer
from trainer.verifiers.cascade import run_cascade
from trainer.verifiers.choice import multiple_choice
from trainer.environments.replay import environment_replay
from trainer.verifiers.exact import exact_match
from trainer.verifiers.extract import extract_answer
from trainer.verifiers.json_checks import json_fields, json_schema
from trainer.verifiers.math_equiv import math_equivalence
from trainer.verifiers.numeric import numeric_match
from trainer.verifiers.regex import regex_match

DOMAINS = all_domains()
MATH = sorted(slug for slug in DOMAINS if slug.startswith("math-"))
TASKS_PER_MATH_DOMAIN = 15
CONSTANTS = ["0", "1", "-1", "Yes", "No", "None", "null", "{}", "[]", "True", ""]
NON_FINITE = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999"]


def verify(slug: str, completion: str, task: Task):
    return DOMAINS[slug].verify(completion, task, isolation="inline")


def sample(slug: str, n: int, seed: int = 0) -> list[Task]:
    spec, rng = DOMAINS[slug], random.Random(seed)
    return [spec.source.sample(rng, i % spec.source.levels) for i in range(n)]


def t(answer=None, **meta) -> Task:
    return Task("test", "1", "q", answer=answer, meta=meta)


# --- one final answer --------------------------------------------------------------------------

def test_final_answers_reads_every_container_in_order():
    text = r"first \boxed{1}, then <answer>2</answer>, then \fbox{3}"
    assert final_answers(text) == ["1", "2", "3"]
    assert final_answers(text, methods=("answer_tag",)) == ["2"]
    assert final_answers("<answer>\\boxed{3} or 5</answer>") == ["3 or 5"]  # a box inside a tag does not hide the tag's text
    assert final_answers("no container\nFinal answer: 9") == ["9"]
    assert final_answers("no container", methods=("boxed",)) == []


@pytest.mark.parametrize("completion", [
    r"\boxed{4} or \boxed{5}", r"\boxed{5} or \boxed{4}", "<answer>4</answer><answer>5</answer>",
    "<answer>5</answer> \\boxed{4}", "\\boxed{4}\n\\boxed{5}", "<answer>4 or 5</answer>", "<answer>5, 4</answer>",
    "<answer>4; 5</answer>", "<answer>4\n5</answer>", "<answer>either 5</answer>", "<answer>\\pm 5</answer>",
    "<answer>4 5</answer>", "<answer>" + " ".join(str(k) for k in range(100)) + "</answer>",
])
def test_extract_refuses_several_answers_and_hedges(completion):
    v = extract_answer(completion, t("5"))
    assert v.outcome is Outcome.FAIL and v.reward == 0.0, v.details
    assert v.details["error"]


@pytest.mark.parametrize("completion, extracted", [
    (r"\boxed{5}", "5"), (r"so \boxed{5}. Again: \boxed{ 5 }", "5"), ("<answer>\\boxed{5}</answer>", "5"),
    ("<answer>1,000</answer>", "1,000"), ("work\nFinal answer: 5", "5"),
])
def test_extract_keeps_one_answer_written_once_or_repeated(completion, extracted):
    v = extract_answer(completion, t("5" if extracted != "1,000" else 1000))
    assert v.outcome is Outcome.PASS and v.details["extracted"] == extracted


@pytest.mark.parametrize("completion", ["", "<answer></answer>", r"\boxed{}", "   \n "])
def test_extract_empty_is_a_parse_error(completion):
    assert extract_answer(completion, t("5")).outcome is Outcome.PARSE_ERROR


@pytest.mark.parametrize("answer, gold", [
    ("Paris or London", "Paris"), ("London or Paris", "Paris"), ("Paris, London", "Paris"), ("Paris/London", "Paris"),
    ("Paris; London", "Paris"), ("either Paris", "Paris"), ("Paris\nLondon", "Paris"), ("Paris and London", "Paris"),
    ("not London but Paris", "Paris"), ("3 5", "5"), ("1 2 3 4", "1234"), ("x = 3, x = 5", "5"), ("\\pm 5", "5"),
    ("5 (6)", 5), ("3 \\\\ 5", "5"), ("3 \\quad 5", "5"),
    ("1, 2, 3", "1, 2"), ("True/False", "True"), ("Paris " * 200, "Paris"),
])
def test_hedge_reason_finds_more_than_one_value(answer, gold):
    assert hedge_reason(answer, gold) is not None


@pytest.mark.parametrize("answer, gold", [
    ("1,000", 1000), ("1{,}000", "1000"), ("12,345.5", "12345.5"), ("-\\frac{17}{3}", "-\\frac{17}{3}"), ("x = -7/3", "-\\frac{7}{3}"),
    ("2, 1", "1, 2"), ("Alice is a knight and Bob is a knave", "Alice is a knight, and Bob is a knave"),
    ("1 - 3x + 2x^2", "2x^{2} - 3x + 1"), ("[1,\n 2]", "[1, 2]"), ("1.5 \\times 10^{3}", "1500"), ("45.23%", 45.23),
    ("3x + 5", "5"), ("(-17)/3", "-\\frac{17}{3}"), ("-5\\frac{2}{3}", "-\\frac{17}{3}"), ("5\\,", "5"), ("1\\,000", 1000),
])
def test_hedge_reason_leaves_single_values_alone(answer, gold):
    assert hedge_reason(answer, gold) is None


def test_one_final_answer_says_why():
    assert one_final_answer("nothing", methods=("boxed",)) == (None, "no answer found")
    assert one_final_answer(r"\boxed{2} \boxed{3}")[1].startswith("several different answers")


# --- math --------------------------------------------------------------------------------------

@pytest.mark.parametrize("slug", MATH)
def test_math_gold_and_every_equivalent_form_pass(slug):
    for task in sample(slug, TASKS_PER_MATH_DOMAIN):
        gold = verify(slug, reference_completion(DOMAINS[slug], task), task)
        assert gold.outcome is Outcome.PASS, (task.answer, gold.details)
        forms = equivalent_forms(task)
        assert len(forms) >= 8
        for form in forms:
            v = verify(slug, form, task)
            assert v.outcome is Outcome.PASS, (task.answer, form, v.details)


@pytest.mark.parametrize("slug", MATH)
def test_math_wrong_forms_hedges_constants_and_non_finite_fail(slug):
    for task in sample(slug, TASKS_PER_MATH_DOMAIN, seed=1):
        for form in wrong_forms(task):
            v = verify(slug, form, task)
            assert v.outcome is not Outcome.PASS and v.reward == 0.0, (task.answer, form, v.details)


@pytest.mark.parametrize("slug", MATH)
def test_math_hedged_boxes_fail_in_both_orders(slug):
    task = sample(slug, 1, seed=2)[0]
    gold, wrong = task.answer, task.meta["wrong_answer"]
    for completion in (rf"\boxed{{{wrong}}} or \boxed{{{gold}}}", rf"\boxed{{{gold}}} or \boxed{{{wrong}}}"):
        assert verify(slug, completion, task).outcome is Outcome.FAIL


@pytest.mark.parametrize("slug", ["math-linear", "math-fractions", "math-quadratic"])
def test_math_numeric_gold_inside_an_equation_list_or_expression_fails(slug):
    task = sample(slug, 1, seed=3)[0]
    gold, wrong = task.answer, task.meta["wrong_answer"]
    for completion in (rf"\boxed{{x = {wrong}, x = {gold}}}", rf"\boxed{{3x + {gold}}}", rf"\boxed{{{gold}x}}", rf"\boxed{{\{{{gold}, {wrong}\}}}}"):
        assert verify(slug, completion, task).outcome is not Outcome.PASS, completion


HIDING_PLACES = [r"{w} \to {g}", r"{g} \rightarrow {w}", r"{w} \mapsto {g}", "{w} → {g}", "{g} -> {w}", "{w} => {g}",
                 "{w} ... {g}", r"{w} \ldots {g}", r"{w} \setminus {g}", r"{w} \hspace{{1em}} {g}", r"{w} \| {g}",
                 "{w} ∣ {g}", "{w} ⁄ {g}", "{w}、{g}", "{w}​{g}", "{w} ᴏʀ {g}", r"{w} \Rightarrow {g}",
                 r"{w} \implies {g}", r"{w} \sim {g}", "{w} ~ {g}", "{{{g}}}_{{{w}}}", r"{g}\text{{{w}}}",
                 r"\cancel{{{w}}} {g}", r"\textcolor{{white}}{{{w}}} {g}", r"{g} \boxed{{{w}}}", r"{w} \\ {g}"]
"""Separators and wrappers that hid a second value beside the gold (found by red-teaming)."""


@pytest.mark.parametrize("slug", MATH)
def test_math_a_second_value_hidden_behind_any_separator_fails(slug):
    for task in sample(slug, 4, seed=5):
        for wrong in ("3", str(task.meta["wrong_answer"])):
            for place in HIDING_PLACES:
                completion = "$\\boxed{" + place.format(w=wrong, g=task.answer) + "}$"
                assert verify(slug, completion, task).score == 0, completion
        assert verify(slug, "$\\boxed{" + str(task.answer) + "}$", task).outcome is Outcome.PASS


@pytest.mark.parametrize("answer, gold", [
    ("1 - 3x + 2x^2", "2x^{2} - 3x + 1"), ("2*x**2 - 3*x + 1", "2x^{2} - 3x + 1"), ("2 \\cdot x^2 - 3x + 1", "2x^{2} - 3x + 1"),
    ("\\{3, 1, 2\\}", "\\{1, 2, 3\\}"), ("1{,}000", "1000"), ("1\\,000", "1000"), ("1,000", "1000"), ("\\dfrac{3}{4}", "\\frac{3}{4}"),
    ("0.75", "\\frac{3}{4}"), ("x = 5", "5"), ("[1, 2)", "[1, 2)"), ("x = 2", "x = 2"), ("{5}", "5"), ("\\text{5}", "5"),
    ("\\mathbf{5}", "5"), ("1e3", "1000"), ("-5\\frac{2}{3}", "-\\frac{17}{3}"), ("(-17)/3", "-\\frac{17}{3}"), ("5\\,", "5"),
    ("1\\ 000", "1000"), ("-(2x^2 - 3x + 1)", "-2x^{2} + 3x - 1"),
])
def test_math_equal_forms_pass(answer, gold):
    v = math_equivalence(rf"\boxed{{{answer}}}", t(gold))
    assert v.outcome is Outcome.PASS, v.details


@pytest.mark.parametrize("answer, gold, why", [
    ("x + y", "2", "kind"), ("x^2 + 1", "2", "kind"), ("3x + 2", "2", "kind"), ("\\{2\\}", "2", "kind"), ("(1, 2)", "\\{1, 2\\}", "kind"), ("2", "x^2", "kind"),
    ("\\text{NaN}", "2", "kind"), ("\\frac{0}{0}", "2", "not a number"), ("\\infty", "2", "infinite"),
    ("\\frac{d}{dx}(x^2)", "2x", "not evaluated"), ("2 \\text{ or } 3", "2", "hedged"), ("2, 3", "2", "hedged"),
])
def test_math_refuses_other_kinds_non_finite_and_unevaluated(answer, gold, why):
    v = math_equivalence(rf"\boxed{{{answer}}}", t(gold))
    assert v.outcome is not Outcome.PASS
    assert why in v.details.get("error", ""), v.details


def test_math_form_asked_for_by_the_task():
    simplify = t("\\frac{5}{6}", form="number", answer_lhs=[])
    assert math_equivalence(r"\boxed{\frac{1}{2} + \frac{1}{3}}", simplify).outcome is Outcome.FAIL
    assert math_equivalence(r"\boxed{\frac{10}{12}}", simplify).outcome is Outcome.PASS
    assert math_equivalence(r"\boxed{x = \frac{5}{6}}", simplify).outcome is Outcome.FAIL  # no variable in this task
    expand = t("x^{2} + 3x + 2", form="expanded")
    assert math_equivalence(r"\boxed{(x + 1)(x + 2)}", expand).outcome is Outcome.FAIL
    assert math_equivalence(r"\boxed{2 + 3x + x^2}", expand).outcome is Outcome.PASS
    assert math_equivalence(r"\boxed{(x + 1)(x + 2)}", t("x^{2} + 3x + 2")).outcome is Outcome.PASS  # no form asked


def test_math_infinity_matches_only_an_infinite_gold():
    assert math_equivalence(r"\boxed{\infty}", t("\\infty")).outcome is Outcome.PASS
    assert math_equivalence(r"\boxed{-\infty}", t("\\infty")).outcome is Outcome.FAIL
    assert math_equivalence(r"\boxed{\text{NaN}}", t("\\infty")).outcome is not Outcome.PASS


def test_math_agrees_with_math_verify_on_equivalent_forms():
    """Independent reference: math-verify's own verify(parse(gold), parse(answer)) on the boxed forms it can read."""
    from math_verify import parse, verify as mv_verify

    agree = total = 0
    for slug in MATH:
        for task in sample(slug, 4, seed=4):
            gold = parse(f"${task.answer}$", parsing_timeout=None)
            for form in equivalent_forms(task):
                if "**" in form or "=" in form or "\\boxed" not in form or "<answer>" in form:
                    continue  # math-verify reads no python powers or <answer> tags, and (its rule) not every assignment
                total += 1
                agree += bool(mv_verify(gold, parse(form, parsing_timeout=None), timeout_seconds=None))
    assert total > 100 and agree / total > 0.95, (agree, total)


# --- numbers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", NON_FINITE)
def test_non_finite_numbers_never_match(text):
    assert numeric_match(text, t(5.0), abs_tol=1e300).outcome is not Outcome.PASS
    assert json_fields(f'{{"x": {text}}}', t({"x": 5.0}), default_tolerance={"abs": 1e300}).outcome is not Outcome.PASS
    assert math_equivalence(rf"\boxed{{{text}}}", t("5")).outcome is not Outcome.PASS


def test_numeric_whole_is_one_number():
    assert numeric_match("1 2 3 4", t(1234)).outcome is Outcome.FAIL
    assert numeric_match("1 2 3 4", t(1234)).details["error"].startswith("hedged answer")
    assert numeric_match("4/2", t(2)).outcome is Outcome.FAIL and numeric_match("1/2", t(0.5)).outcome is Outcome.PASS
    assert numeric_match("1234", t(1234)).outcome is Outcome.PASS
    assert numeric_match("1,234", t(1234)).outcome is Outcome.PASS
    assert numeric_match("1 or 1234", t(1234), take="last").outcome is Outcome.FAIL
    assert numeric_match("so 12 * 3 = 36\n36", t(36), take="last").outcome is Outcome.PASS


def test_numeric_percent_as_asked():
    assert numeric_match("45.23%", t(45.23, percent="points")).outcome is Outcome.PASS
    assert numeric_match("45.23%", t(45.23)).outcome is Outcome.FAIL  # 45.23% is 0.4523 by default
    assert numeric_match("45.23%", t(0.4523)).outcome is Outcome.PASS
    assert numeric_match("1.53%", t(1.53, percent="fraction")).outcome is Outcome.FAIL


def _nan_transcript(task: Task, value: str) -> str:
    calls = [f'{{"tool": "set", "key": "{key}", "value": {value}}}' for key in task.meta["targets"]]
    return "\n".join(calls + ['{"tool": "submit"}'])


@pytest.mark.parametrize("value", ["NaN", "Infinity", '"1e308 * 10 - 1e308 * 10"', '"1e308 * 10"'])
def test_calculator_kv_never_accepts_non_finite(value):
    for task in sample("tool-calculator-kv", 6):
        v = environment_replay(_nan_transcript(task, value), task)
        assert v.outcome is not Outcome.PASS and v.reward == 0.0, v.details
        assert verify("tool-calculator-kv", _nan_transcript(task, value), task).reward == 0.0
    env = CalculatorKVEnv()
    env.reset(Task("tool-calculator-kv", "1", "q", meta={"initial_store": {}, "targets": {"total": 6}}))
    env.store["total"] = float("nan")  # even if a NaN reached the store, it would not match
    assert env.evaluate().outcome is Outcome.FAIL


def test_filesystem_every_candidate_value_satisfies_nothing():
    task = sample("tool-filesystem", 1)[0]
    env = FileSystemEnv()
    env.reset(task)
    for path, key, _ in task.meta["requirements"]:
        from trainer.catalogue.tool_use import SETTINGS

        env.files[path] += "".join(f"{key} = {v}\n" for v in SETTINGS[key])
    assert env.evaluate().outcome is Outcome.FAIL


def test_doc_extraction_is_exact_and_doc_ratios_fit_the_rounding():
    for task in sample("doc-extraction", 20):
        gold = task.answer
        assert verify("doc-extraction", f"<answer>{gold:,}</answer>", task).outcome is Outcome.PASS
        for off in (gold + 1, gold - 1, gold * 1.0004):
            assert verify("doc-extraction", f"<answer>{off}</answer>", task).outcome is Outcome.FAIL
    for task in sample("doc-ratios", 30):
        gold = task.answer
        assert verify("doc-ratios", f"<answer>{gold:.4f}</answer>", task).outcome is Outcome.PASS
        assert verify("doc-ratios", f"<answer>{gold + 0.01:.2f}</answer>", task).outcome is Outcome.FAIL
        assert verify("doc-ratios", f"<answer>{gold - 0.01:.2f}</answer>", task).outcome is Outcome.FAIL
        with_percent = verify("doc-ratios", f"<answer>{gold}%</answer>", task).outcome
        assert with_percent is (Outcome.PASS if task.meta["percent"] == "points" else Outcome.FAIL)
        # A midpoint between two roundings matches neither: one number cannot cover two golds.
        for midpoint in (gold - 0.005, gold + 0.005):
            assert verify("doc-ratios", f"<answer>{midpoint:.3f}</answer>", task).outcome is Outcome.FAIL


def test_ratio_gold_is_rounded_half_up_from_the_exact_value():
    from fractions import Fraction

    assert documents.round_half_up(Fraction(1, 8), 2) == 0.13  # round(0.125, 2) == 0.12
    assert documents.round_half_up(Fraction(-1, 8), 2) == -0.13


# --- label balance and partial credit ---------------------------------------------------------

def test_doc_consistency_no_constant_beats_chance():
    """The injected error is uniform: the most frequent answer is about as rare as any other."""
    rng = random.Random(0)
    n = 3000
    answers = Counter(documents.q_consistency(random.Random(rng.getrandbits(32)), 0)[1] for _ in range(n))
    support = 2 * documents.CONSISTENCY_ERROR + 1
    assert len(answers) > 0.9 * support  # spread over the whole range
    assert max(answers.values()) / n < 10 / support  # no value (0 included) is common
    assert answers[0] / n < 5 / support
    tasks = sample("doc-consistency", 200)
    for constant in ("0", "1", "-1"):
        passed = sum(verify("doc-consistency", f"<answer>{constant}</answer>", task).outcome is Outcome.PASS for task in tasks)
        assert passed <= 3, (constant, passed)


@pytest.mark.parametrize("slug", ["doc-extraction", "doc-ratios", "doc-json", "doc-consistency"])
def test_doc_constants_and_non_finite_earn_nothing(slug):
    tasks = sample(slug, 40)
    for constant in CONSTANTS + NON_FINITE:
        rewards = [verify(slug, f"<answer>{constant}</answer>", task).reward for task in tasks]
        assert sum(r or 0 for r in rewards) <= 1.0, (constant, rewards)


def test_doc_json_partial_credit_is_not_paid_for_the_question():
    for task in sample("doc-json", 10):
        year = task.answer["fiscal_year"]
        only_year = verify("doc-json", f'<answer>{json.dumps({"fiscal_year": year})}</answer>', task)
        assert only_year.reward == 0.0
        wrong_figures = {k: -1 for k in task.answer} | {"fiscal_year": year}
        assert verify("doc-json", f"<answer>{json.dumps(wrong_figures)}</answer>", task).reward == 0.0
        one_figure = {"revenue": task.answer["revenue"], "fiscal_year": year}
        v = verify("doc-json", f"<answer>{json.dumps(one_figure)}</answer>", task)
        assert v.outcome is Outcome.PARTIAL and v.reward == pytest.approx(0.25)
        off_by_one = dict(task.answer, revenue=task.answer["revenue"] + 1)
        assert verify("doc-json", f"<answer>{json.dumps(off_by_one)}</answer>", task).outcome is not Outcome.PASS
        duplicate = json.dumps(task.answer)[:-1] + f', "revenue": {task.answer["revenue"] + 1}}}'
        assert verify("doc-json", f"<answer>{duplicate}</answer>", task).reward == 0.0


# --- regex -------------------------------------------------------------------------------------

@pytest.mark.parametrize("completion, answer, outcome", [
    ("42", "42", Outcome.PASS), ("420", "42", Outcome.FAIL), ("the answer is 42", "42", Outcome.FAIL),
    ("Paris", "Paris", Outcome.PASS), ("not Paris but London", "Paris", Outcome.FAIL), ("432", "4.2", Outcome.FAIL),
    ("a+b", "a+b", Outcome.PASS), ("aab", "a+b", Outcome.FAIL), ("", "42", Outcome.FAIL),
])
def test_regex_answer_is_an_anchored_literal(completion, answer, outcome):
    assert regex_match(completion, t(answer)).outcome is outcome
    assert regex_match(completion, t(answer), mode="search").outcome is outcome  # search needs the domain's own pattern


def test_regex_search_with_own_pattern_finds_one_value():
    pattern = r"\d{4}-\d{2}-\d{2}"
    assert regex_match("It is 2024-01-31.", t(), pattern=pattern, mode="search").outcome is Outcome.PASS
    assert regex_match("2024-01-31 or 2024-02-01", t(), pattern=pattern, mode="search").outcome is Outcome.FAIL
    assert regex_match("It is 2024-01-31.", t(), pattern=pattern).outcome is Outcome.FAIL  # fullmatch by default


def test_regex_cascade_on_an_uploaded_domain():
    spec = {"stages": [{"type": "extract", "params": {"methods": ["answer_tag"]}}, {"type": "regex"}]}
    assert run_cascade(spec, "<answer>42</answer>", t("42"), isolation="inline").outcome is Outcome.PASS
    for completion in ("<answer>420</answer>", "<answer>42 or 43</answer>", "<answer>43</answer><answer>42</answer>"):
        assert run_cascade(spec, completion, t("42"), isolation="inline").outcome is Outcome.FAIL


# --- exact, choice, json: constants, hedges, every option --------------------------------------

@pytest.mark.parametrize("completion", ["Paris or London", "London or Paris", "Paris, London", "Paris\nLondon", "", "Paris Paris"] + CONSTANTS)
def test_exact_passes_only_the_answer(completion):
    assert exact_match(completion, t("Paris")).outcome is not Outcome.PASS


@pytest.mark.parametrize("completion", ["A B C D", "A, B, C, D", "A/B/C/D", "ABCD", "all of them", "A or C", "C or A", "not A",
                                        "red green blue yellow", ""] + CONSTANTS)
def test_choice_every_option_at_once_fails(completion):
    task = t("C", choices=["red", "green", "blue", "yellow"])
    assert multiple_choice(completion, task).outcome is not Outcome.PASS


@pytest.mark.parametrize("completion", ["{}", "[]", '""', "null", '{"a": 1, "a": 2}', '{"a": NaN}', "{} " + "x" * 300 + ' {"a": 1}',
                                        '1, 2, 3 ' * 50 + '{"a": 1}',
                                        '```json\n{"a": 1}\n```\n```json\n{"a": 2}\n```'])
def test_json_schema_refuses_empty_and_ambiguous_values(completion):
    schema = {"type": ["object", "array", "string", "null", "number"]}
    assert json_schema(completion, t(), schema=schema).outcome is not Outcome.PASS


def test_json_schema_allows_empty_when_asked_and_agreeing_blocks():
    assert json_schema("[]", t(), schema={"type": "array"}, allow_empty=True).outcome is Outcome.PASS
    same = '```json\n{"a": 1}\n```\nagain\n```json\n{"a": 1}\n```'
    assert json_schema(same, t(), schema={"type": "object"}).outcome is Outcome.PASS


@pytest.mark.parametrize("completion", CONSTANTS + ['{"a": [1, 2], "b": "x"}', '{"a": "1 or 2", "b": "x"}', '{"a": {}, "b": "x"}',
                                                    '{"a": 1, "b": "x or y"}', '{"a": 2, "b": "x"}'])
def test_json_fields_constants_and_hedges_do_not_pass(completion):
    v = json_fields(completion, t({"a": 1, "b": "x"}), partial_credit=False)
    assert v.outcome is not Outcome.PASS


@pytest.mark.parametrize("slug", MATH + ["doc-extraction", "doc-ratios", "doc-consistency", "doc-json"])
def test_very_long_answers_listing_candidates_fail(slug):
    task = sample(slug, 1, seed=5)[0]
    gold = reference_completion(DOMAINS[slug], task)
    inner = gold.split("<answer>")[-1].split("</answer>")[0] if "<answer>" in gold else str(task.answer)
    candidates = [str(k) for k in range(-300, 300)] + [inner]
    for completion in ("<answer>" + ", ".join(candidates) + "</answer>", "<answer>" + "\n".join(candidates) + "</answer>",
                       "".join(f"<answer>{c}</answer>" for c in candidates), "".join(f"\\boxed{{{c}}}" for c in candidates)):
        v = verify(slug, completion, task)
        assert v.outcome is not Outcome.PASS and (v.reward or 0.0) < 0.5, (slug, v.details.get("error"))
