"""The verifier audit finds what a policy could game, and passes what is sound."""
from __future__ import annotations

import dataclasses
import random

import pytest

from trainer import catalogue
from trainer.audit import audit_catalogue_domain, audit_domain
from trainer.audit.probes import answer_format, text_probes
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

TAGGED = {"stages": [{"type": "extract", "params": {"methods": ["answer_tag"]}}, {"type": "exact"}]}


@dataclasses.dataclass
class Words:
    """A toy source: answer a word; ``yes_share`` of tasks answer 'yes' when set."""

    slug: str = "toy"
    levels: int = 1
    yes_share: float | None = None

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        n = rng.randrange(10_000)
        if self.yes_share is not None:
            answer = "yes" if rng.random() < self.yes_share else "no"
        else:
            answer = f"w{n}"
        return Task(self.slug, f"t{n}", f"Say {answer}.", answer)


def many(fn):
    return lambda items: [fn(c, t) for c, t in items]


def substring_verifier(completion: str, task: Task) -> Verification:
    """A weak verifier: passes when the gold appears anywhere (a hedge passes)."""
    return Verification.passed() if str(task.answer) in completion else Verification.failed()


def sound_verifier(completion: str, task: Task) -> Verification:
    """One <answer> tag, exactly the gold."""
    import re

    found = re.findall(r"<answer>(.*?)</answer>", completion, re.S)
    if len(found) != 1:
        return Verification.failed(Outcome.PARSE_ERROR)
    return Verification.passed() if found[0].strip() == str(task.answer) else Verification.failed()


def test_a_sound_verifier_is_clean():
    report = audit_domain(slug="toy", verifier=TAGGED, source=Words(), verify_many=many(sound_verifier))
    assert report.false_positives == 0 and report.false_negatives_gold == 0, report.to_dict()["classes"]
    assert report.tasks == 12 and report.probes > 12 * 30
    assert {"gold", "hedge", "constant", "non_finite", "long", "outside_tags", "empty"} <= set(report.classes)


def test_a_substring_verifier_is_caught_on_hedges_and_long_answers():
    report = audit_domain(slug="toy", verifier=TAGGED, source=Words(), verify_many=many(substring_verifier))
    assert report.classes["hedge"].false_positives > 0
    assert report.classes["long"].false_positives > 0
    assert report.classes["outside_tags"].false_positives > 0
    example = report.classes["hedge"].examples[0]
    assert example["outcome"] == "pass" and example["expect"] == "no_reward" and example["completion"].startswith("<answer>")


def test_a_verifier_that_fails_the_gold_is_a_false_negative():
    report = audit_domain(slug="toy", verifier=TAGGED, source=Words(), verify_many=many(lambda c, t: Verification.failed()))
    assert report.false_negatives_gold == report.tasks and report.false_positives == 0


def test_infrastructure_outcomes_on_hostile_probes_are_masked_false_positives():
    def crashes_on_long(c: str, t: Task) -> Verification:
        return Verification(Outcome.SANDBOX_ERROR) if len(c) > 1000 else sound_verifier(c, t)

    report = audit_domain(slug="toy", verifier=TAGGED, source=Words(), verify_many=many(crashes_on_long))
    assert report.masked > 0 and report.classes["long"].false_positives > 0


def test_an_imbalanced_label_lets_a_constant_beat_chance():
    biased = audit_domain(slug="toy", verifier=TAGGED, source=Words(yes_share=0.85), verify_many=many(sound_verifier))
    assert [c["constant"] for c in biased.constant_bias if c["flagged"]] == ["yes"]
    assert biased.classes["constant_bias"].false_positives == 1
    balanced = audit_domain(slug="toy", verifier=TAGGED, source=Words(yes_share=0.5), verify_many=many(sound_verifier))
    assert not [c for c in balanced.constant_bias if c["flagged"]], balanced.constant_bias


def test_every_option_at_once_is_probed_for_choice_tasks():
    task = Task("mc", "1", "Pick", "B", meta={"choices": ["red", "green", "blue"]})
    probes = text_probes(task, answer_format(TAGGED), "B", ["A"], options=task.meta["choices"])
    texts = [p.completion for p in probes if p.cls == "all_options"]
    assert "<answer>A, B, C</answer>" in texts and "<answer>ABC</answer>" in texts


def test_report_is_json_ready_and_has_the_contract_keys():
    import json

    d = audit_domain(slug="toy", verifier=TAGGED, source=Words(), verify_many=many(substring_verifier)).to_dict()
    json.dumps(d)
    assert {"domain", "tasks", "probes", "false_positives", "false_negatives_gold", "false_negatives_equivalent",
            "masked", "wall_s", "auditor_version", "classes", "constant_bias"} <= set(d)


def test_a_pinned_upload_draws_its_own_tasks_and_a_pinned_code_domain_the_catalogues():
    """A control-plane version as a run pins it is the trainer's one domain type: the snapshot's
    verifier and version, an upload's own tasks, a code domain's task source from the catalogue."""
    snapshot = {"title": "Up", "kind": "other", "family": "jsonl", "verifier": TAGGED,
                "task_source": {"family": "jsonl", "tasks": [dataclasses.asdict(Task("up", "1", "q", "a"))]}}
    up = catalogue.pinned("up", 3, snapshot)
    assert up.source.sample(random.Random(0)).answer == "a"
    assert (up.version, up.verifier_spec, up.is_upload) == (3, TAGGED, True)
    code = catalogue.pinned("builtin-addition", 2, {"title": "A", "kind": "math", "verifier": TAGGED,
                                                    "task_source": {"family": "builtin"}})
    assert code.source is catalogue.get("builtin-addition").source and code.verifier_spec == TAGGED
    assert (code.version, code.family, code.is_upload) == (2, "builtin", False)
    with pytest.raises(ValueError, match="no task source"):
        catalogue.pinned("no-such-domain", 1, {"title": "x", "kind": "math", "verifier": TAGGED, "task_source": {"family": "builtin"}})
    with pytest.raises(ValueError, match="holds no tasks"):
        catalogue.pinned("up", 1, {**snapshot, "task_source": {"family": "jsonl", "tasks": []}})



@pytest.mark.parametrize("slug, snapshot, why", [
    ("builtin-addition", {"title": "x", "kind": "math", "verifier": TAGGED,
                          "task_source": {"family": "jsonl", "tasks": [{"domain": "d", "id": "1", "prompt": "q"}]}},
     "may not take the slug of a domain the code defines"),
    ("up", {"title": "x", "kind": "math", "verifier": TAGGED, "task_source": {"family": "jsonl", "tasks": [{"nope": 1}]}},
     "uploaded task 0 is not a task"),
    ("up", {"title": "x", "kind": "math", "verifier": TAGGED, "task_source": {"family": "jsonl", "tasks": ["q"]}},
     "uploaded task 0 is not a task"),
    ("builtin-addition", {"kind": "math", "task_source": {"family": "builtin"}}, "has no title, verifier"),
])
def test_a_pin_the_trainer_cannot_use_is_a_value_error_naming_the_domain(slug, snapshot, why):
    """What admission turns into a refusal at ``domains.<slug>`` (controlplane/runs/preflight.py)."""
    with pytest.raises(ValueError, match=why):
        catalogue.pinned(slug, 1, snapshot)


def test_data_never_replaces_a_domain_the_code_defines():
    upload = catalogue.DomainSpec(slug="builtin-addition", title="x", kind="math", family="jsonl",
                                  source=catalogue.get("builtin-addition").source, verifier_spec=TAGGED,
                                  task_source_spec={"family": "jsonl"})
    with pytest.raises(ValueError, match="defined by the code"):
        catalogue.register(upload, replace=True, data=True)
    assert catalogue.code_domains()["builtin-addition"].family == "builtin"


@pytest.mark.parametrize("slug", ["builtin-addition", "builtin-parity"])
def test_builtin_domains_audit_clean(slug):
    report = audit_catalogue_domain(slug)
    assert report.false_positives == 0 and report.false_negatives_gold == 0, report.to_dict()["classes"]


def test_code_domain_audit_runs_hostile_programs_in_the_sandbox(real_sandbox):
    report = audit_catalogue_domain("code-humaneval", tasks=2, chance_tasks=2, context=real_sandbox)
    hostile = {name: c for name, c in report.classes.items() if name.startswith("code.")}
    assert len(hostile) >= 12 and all(c.probes == 2 for c in hostile.values())
    assert report.false_negatives_gold == 0, report.to_dict()["classes"]["gold"]
    assert report.false_positives == 0, {k: v.to_dict() for k, v in report.classes.items() if v.false_positives}


@dataclasses.dataclass
class Pairs:
    """Answer the pair of letters the task names, in either order (``ab`` and ``ba`` are the same
    answer); ``open`` marks the gold as one valid answer among many."""

    slug: str = "pairs"
    levels: int = 1
    open: bool = False

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        a, b = rng.sample("abcdef", 2)
        meta = {"answer_is_example": True} if self.open else {}
        return Task(self.slug, f"t{rng.randrange(10**9)}", f"Name {a} and {b}.", a + b, meta=meta)


def pair_verifier(completion: str, task: Task) -> Verification:
    """Sound: the tagged answer is the task's two letters in either order."""
    import re

    found = re.findall(r"<answer>(.*?)</answer>", completion, re.S)
    ok = len(found) == 1 and sorted(found[0].strip()) == sorted(str(task.answer))
    return Verification.passed() if ok else Verification.failed()


def test_an_equivalent_constant_is_the_gold_to_the_verifier_not_a_false_positive():
    # 'ba' as a constant passes where the gold is 'ab': each passes on the other's task.
    report = audit_domain(slug="pairs", verifier=TAGGED, source=Pairs(), verify_many=many(pair_verifier), chance_tasks=64)
    assert report.false_positives == 0, report.to_dict()["classes"]


def test_a_verifier_that_accepts_a_wrong_constant_is_still_caught():
    @dataclasses.dataclass
    class CommonAB(Pairs):
        def sample(self, rng: random.Random, level: int = 0) -> Task:
            task = super().sample(rng, level)
            return dataclasses.replace(task, answer="ab") if rng.random() < 0.3 else task

    def lenient(completion: str, task: Task) -> Verification:
        if "<answer>ab</answer>" in completion:
            return Verification.passed()  # the common answer passes every task
        return pair_verifier(completion, task)

    report = audit_domain(slug="pairs", verifier=TAGGED, source=CommonAB(), verify_many=many(lenient), chance_tasks=64)
    assert report.classes["constant"].false_positives > 0, report.to_dict()["classes"]["constant"]


def test_open_ended_tasks_get_no_perturbed_probes_and_only_refused_wrong_answers():
    passes_anything_but_junk = many(lambda c, t: Verification.failed() if any(j in c for j in ("<answer>0<", "nan"))
                                    else pair_verifier(c, t))
    report = audit_domain(slug="pairs", verifier=TAGGED, source=Pairs(open=True), verify_many=passes_anything_but_junk)
    assert "perturbed" not in report.classes
    assert any("open-ended" in note for note in report.skipped)
    assert report.false_positives == 0, report.to_dict()["classes"]
    # An open-ended verifier that accepts anything is still caught by the generic constants.
    report = audit_domain(slug="pairs", verifier=TAGGED, source=Pairs(open=True), verify_many=many(lambda c, t: Verification.passed()))
    assert report.classes["constant"].false_positives > 0


@pytest.mark.parametrize("slug", ["swe-bugfix", "swe-feature", "swe-refactor"])
def test_repository_domains_audit_clean_with_hostile_trees_in_the_sandbox(real_sandbox, slug):
    report = audit_catalogue_domain(slug, tasks=2, chance_tasks=2, context=real_sandbox)
    classes = report.to_dict()["classes"]
    assert {"gold", "equivalent", "perturbed", "empty", "constant", "hedge", "long"} <= set(classes)
    assert sum(1 for name in classes if name.startswith("code.")) >= 12
    assert report.false_negatives_gold == 0 and report.false_negatives_equivalent == 0, classes
    assert report.false_positives == 0 and report.masked == 0, {k: v for k, v in classes.items() if v.get("false_positives")}


@pytest.mark.parametrize("slug", ["bfcl-simple", "bfcl-parallel-multiple", "bfcl-live-multiple", "bfcl-relevance"])
def test_function_calling_domains_audit_clean(slug):
    report = audit_catalogue_domain(slug, tasks=12, chance_tasks=12)
    classes = report.to_dict()["classes"]
    assert {"gold", "equivalent", "perturbed", "hedge", "long"} <= set(classes)
    assert report.false_negatives_gold == 0 and report.false_negatives_equivalent == 0, classes
    assert report.false_positives == 0 and report.masked == 0, {k: v for k, v in classes.items() if v.get("false_positives")}


@pytest.mark.parametrize("slug", ["cad-part", "cad-modify", "cad-fit"])
def test_cad_domains_audit_clean_in_the_sandbox(real_sandbox, slug):
    from tests.services import require_sandbox_libs

    require_sandbox_libs()
    report = audit_catalogue_domain(slug, tasks=3, chance_tasks=3, context=real_sandbox)
    classes = report.to_dict()["classes"]
    assert {"gold", "equivalent", "perturbed", "empty", "constant"} <= set(classes)
    assert sum(1 for name in classes if name.startswith("code.")) >= 7
    assert report.false_negatives_gold == 0 and report.false_negatives_equivalent == 0, classes
    assert report.false_positives == 0 and report.masked == 0, {k: v for k, v in classes.items() if v.get("false_positives") or v.get("masked")}


@pytest.mark.parametrize("slug", ["game-coin", "game-cookingworld", "game-sorting"])
def test_text_game_domains_audit_clean(slug):
    from tests.services import require_java

    require_java()
    report = audit_catalogue_domain(slug, tasks=4, chance_tasks=4)
    classes = report.to_dict()["classes"]
    assert report.false_negatives_gold == 0 and report.false_positives == 0 and report.masked == 0, classes


@pytest.mark.parametrize("slug", ["bfcl-multi-base", "bfcl-multi-miss-param"])
def test_multi_turn_function_calling_domains_audit_clean(slug):
    report = audit_catalogue_domain(slug, tasks=4, chance_tasks=4)
    classes = report.to_dict()["classes"]
    assert report.false_negatives_gold == 0 and report.false_positives == 0 and report.masked == 0, classes


@pytest.mark.parametrize("slug", ["shell-data", "shell-config", "shell-git"])
def test_shell_domains_audit_clean(real_sandbox, slug):
    report = audit_catalogue_domain(slug, tasks=6, chance_tasks=6, context=real_sandbox)
    classes = report.to_dict()["classes"]
    assert {"gold", "equivalent", "perturbed", "empty", "constant", "hedge", "long"} <= set(classes)
    # shell-git adds one or two per task: the reference's tree without its repository, or with the task's own
    perturbed = range(18, 25) if slug == "shell-git" else [12]
    assert classes["constant"]["probes"] == 18 and classes["perturbed"]["probes"] in perturbed, classes
    assert report.false_negatives_gold == 0 and report.false_negatives_equivalent == 0, classes
    assert report.false_positives == 0 and report.masked == 0, {k: v for k, v in classes.items() if v.get("false_positives")}
