"""Models and tokenizers are named, not pathed: a team reaches its own registry versions by name,
directories only under the allow-listed roots (TEMPER_MODEL_DIRS, symlinks resolved first), and
hub ids as before; another team's weights, the server's storage and the rest of the host are
refused with a 422 at the field, in words that do not tell another team's objects from missing
ones, and nothing is saved. Judges are confined the same way: a domain names its own team's
judges, a judge's key variable is on an admin's allow list."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.test import Client

from controlplane.common.model_refs import ModelRefused, is_path_like, resolve_model
from controlplane.domains.models import Domain, DomainVersion
from controlplane.registry.models import Alias, ModelVersion
from controlplane.review.models import Judge, JudgeConfig
from controlplane.runs.models import Checkpoint, Run, RunEvent, RunState
from controlplane.runs.selectors import run_warnings
from controlplane.runs.services import _model_ref_errors
from tests import factories

pytestmark = pytest.mark.django_db


def model_dir(path: Path) -> Path:
    """A directory that looks like a saved model to the checks (config.json and a tokenizer file)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    (path / "tokenizer.json").write_text("{}")
    return path


@pytest.fixture
def host(settings, tmp_path):
    """One allowed root, the server's storage elsewhere under ``var``, and directories outside."""
    class Host:
        pass

    h = Host()
    h.root = tmp_path / "models"
    h.var = tmp_path / "var"
    settings.TEMPER_MODEL_DIRS = [h.root]
    settings.VAR_DIR = h.var
    h.base = model_dir(h.root / "tiny")
    h.outside = model_dir(tmp_path / "outside")
    return h


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def post(client: Client, url: str, body: dict):
    return client.post(url, json.dumps(body), content_type="application/json")


def post_run(world, **fields):
    payload = factories.run_payload(["addition"], team="acme", **fields)
    return post(client_for(world.users["member"]), "/api/runs", payload)


def refused(response, path: str) -> str:
    """The message of the one error at ``path`` of a 422 response."""
    assert response.status_code == 422, response.content
    errors = [e for e in response.json()["errors"] if e["path"] == path]
    assert len(errors) == 1, response.json()
    return errors[0]["message"]


def globex_weights(world, host) -> tuple[ModelVersion, Path, Path]:
    """Globex's trained weights as they lie on the host: a registry version's copy
    (``var/registry/v<id>/model``) and a run's checkpoint (``var/checkpoints/run-<id>/step-300/model``)."""
    run = factories.run(world.other, base_model=str(host.base), state="completed")
    ckpt = model_dir(host.var / "checkpoints" / f"run-{run.id}" / "step-300" / "model")
    version = ModelVersion.objects.create(team=world.other, name=f"tiny@{run.id}/300", base="tiny", base_model=str(host.base),
                                          run=run, step=300, path="")
    copy = model_dir(host.var / "registry" / f"v{version.id}" / "model")
    ModelVersion.objects.filter(pk=version.pk).update(path=str(copy))
    version.refresh_from_db()
    return version, copy, ckpt


# ----------------------------------------------------------------------------- runs: attacks
def test_another_teams_registry_copy_and_checkpoint_are_refused_as_not_found(world, host):
    version, copy, ckpt = globex_weights(world, host)
    before = Run.objects.count()
    for path in (copy, ckpt, host.var / "registry" / "v999999" / "model"):
        message = refused(post_run(world, base_model=str(path)), "base_model")
        assert message == (f"model directory {str(path)!r} not found under the allowed model directories ({host.root}); "
                           "a registry version is named registry:<id or name>")
    # By name, another team's version reads exactly like one that does not exist.
    theirs = refused(post_run(world, base_model=f"registry:{version.id}"), "base_model")
    missing = refused(post_run(world, base_model="registry:999999"), "base_model")
    assert (theirs, missing) == (f"model version '{version.id}' not found", "model version '999999' not found")
    assert refused(post_run(world, base_model=f"registry:{version.name}"), "base_model") == f"model version '{version.name}' not found"
    assert Run.objects.count() == before


def test_storage_is_never_a_raw_path_even_under_an_allowed_root(world, host, settings):
    """An admin who allow-lists the whole var directory still does not open the teams' weights."""
    _, copy, ckpt = globex_weights(world, host)
    settings.TEMPER_MODEL_DIRS = [host.var]
    own = model_dir(host.var / "exports" / "mine")
    before = Run.objects.count()
    for path in (copy, ckpt, own):
        assert "not found under the allowed model directories" in refused(post_run(world, base_model=str(path)), "base_model")
    assert Run.objects.count() == before


@pytest.mark.parametrize("ref", [
    "controlplane/../../../../tmp",
    "{root}/../outside",
    "{root}/tiny/../../outside",
    "~/../../../etc/ssl",
    "/etc/ssl",
])
def test_paths_that_climb_out_of_the_roots_are_refused(world, host, ref):
    ref = ref.format(root=host.root)
    assert is_path_like(ref)
    message = refused(post_run(world, base_model=ref), "base_model")
    assert message.startswith(f"model directory {ref!r} not found under the allowed model directories")
    assert Run.objects.count() == 0


def test_a_symlink_inside_a_root_pointing_outside_is_refused(world, host):
    (host.root / "escape").symlink_to(host.outside, target_is_directory=True)
    (host.root / "inside").symlink_to(host.base, target_is_directory=True)
    message = refused(post_run(world, base_model=str(host.root / "escape")), "base_model")
    assert "not found under the allowed model directories" in message
    assert Run.objects.count() == 0
    # A link that stays inside a root is fine, and what the trainer is given is the real directory.
    assert resolve_model(str(host.root / "inside"), team_id=world.team.id).path == str(host.base.resolve())


@pytest.mark.parametrize("field,config", [
    ("config.tokenizer.path", {"tokenizer": {"path": "/etc/ssl"}}),
    ("config.model.reference_path", {"model": {"reference_path": "/etc/ssl"}}),
])
def test_tokenizer_and_reference_model_paths_are_confined_too(world, host, field, config):
    message = refused(post_run(world, base_model=str(host.base), config=config), field)
    assert message.startswith("model directory '/etc/ssl' not found under the allowed model directories")
    assert Run.objects.count() == 0
    # The validate endpoint says the same and saves nothing either.
    r = post(client_for(world.users["member"]), "/api/runs/validate",
             factories.run_payload(["addition"], team="acme", base_model=str(host.base), config=config))
    assert refused(r, field) == message and Run.objects.count() == 0


# ----------------------------------------------------------------------------- runs: what is allowed
def test_a_directory_under_an_allowed_root_is_a_base_model_for_every_team(world, host):
    """A base model an admin put under TEMPER_MODEL_DIRS is global: every team may train from it."""
    config = {"tokenizer": {"path": str(host.base)}, "model": {"reference_path": str(host.base)}}
    r = post_run(world, base_model=str(host.base), config=config)
    assert r.status_code == 201, r.content
    payload = factories.run_payload(["addition"], team="globex", base_model=str(host.base))
    r = post(client_for(world.other_users["member"]), "/api/runs", payload)
    assert r.status_code == 201, r.content
    assert Run.objects.filter(base_model=str(host.base)).count() == 2


def test_own_registry_version_by_id_name_and_alias(world, host):
    run = factories.run(world.team, base_model=str(host.base), state="completed")
    version = ModelVersion.objects.create(team=world.team, name=f"tiny@{run.id}/20", base="tiny", base_model=str(host.base),
                                          run=run, step=20, path="")
    copy = model_dir(host.var / "registry" / f"v{version.id}" / "model")
    ModelVersion.objects.filter(pk=version.pk).update(path=str(copy))
    Alias.objects.create(team=world.team, base="tiny", name="production", version=version)
    for ref in (f"registry:{version.id}", f"registry:v{version.id}", f"registry:{version.name}", "registry:tiny:production"):
        resolved = resolve_model(ref, team_id=world.team.id)
        assert (resolved.kind, resolved.path) == ("registry", str(copy.resolve()))
    r = post_run(world, base_model=f"registry:{version.name}")
    assert r.status_code == 201, r.content
    assert Run.objects.get(pk=r.json()["id"]).base_model == f"registry:{version.name}"


def test_a_run_from_a_registry_version_continues_its_line(world, host):
    """The checkpoints of a run trained from ``registry:tiny@R/20`` are ``tiny@<run>/<step>`` with
    that version as the first one's parent (not a new base model named after the reference)."""
    first = factories.run(world.team, base_model=str(host.base), state="completed")
    parent = ModelVersion.objects.create(team=world.team, name=f"tiny@{first.id}/20", base="tiny", base_model=str(host.base),
                                         run=first, step=20, path=str(model_dir(host.var / "registry" / "v-parent" / "model")))
    run = factories.run(world.team, base_model=f"registry:{parent.name}", state="running")
    ckpt = Checkpoint.objects.create(run=run, step=5, path=str(host.var / "checkpoints" / f"run-{run.id}" / "step-5"))
    version = ModelVersion.objects.get(checkpoint=ckpt)
    assert (version.name, version.parent_id, version.base) == (f"tiny@{run.id}/5", parent.id, "tiny")


def test_hub_ids_are_passed_on_as_before(world, host):
    for ref in ("Qwen/Qwen2-0.5B", "gpt2", "tiny-llama"):
        assert resolve_model(ref, team_id=world.team.id).kind == "hub"
    assert post_run(world, base_model="Qwen/Qwen2-0.5B").status_code == 201


def test_a_hub_shaped_name_that_is_a_local_directory_is_a_path(world, host, monkeypatch):
    """transformers loads a local directory before it asks the hub: ``var/registry`` relative to
    the server's working directory is a path, and refused like one."""
    monkeypatch.chdir(host.var.parent)
    model_dir(host.var / "registry")
    assert is_path_like("var/registry")
    with pytest.raises(ModelRefused, match="not found under the allowed model directories"):
        resolve_model("var/registry", team_id=world.team.id)


# ----------------------------------------------------------------------------- the worker checks again
def test_the_worker_refuses_a_run_row_written_around_the_api(world, host):
    """A row that names a host path (written by a script, or before the allow list narrowed) is
    refused by the driver before any model is loaded: the run fails with a ``refused`` event."""
    from workers.driver import drive

    domain = factories.domain("wr-addition")
    run = factories.run(world.team, domains=[domain], state="running", base_model="/etc/ssl",
                        config={"tokenizer": {"path": str(host.outside)}})
    assert drive(run.id, worker="test-worker").startswith("refused")
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    event = RunEvent.objects.get(run=run, kind="refused")
    assert [e["path"] for e in event.data["errors"]] == ["base_model", "config.tokenizer.path"]
    assert "not found under the allowed model directories" in event.message


def test_the_worker_gives_the_trainer_the_checked_directories(world, host):
    from controlplane.runs.preflight import confined_model_paths, trainer_config, with_model_paths

    (host.root / "link").symlink_to(host.base, target_is_directory=True)
    run = factories.run(world.team, state="running", base_model=str(host.root / "link"),
                        config={"tokenizer": {"path": str(host.root / "link")}})
    paths, refused = confined_model_paths(run)
    assert refused == []
    cfg = with_model_paths(trainer_config(run, [], {}), paths)
    real = str(host.base.resolve())
    assert (cfg["model"]["path"], cfg["tokenizer"]["path"]) == (real, real)


# ----------------------------------------------------------------------------- judges
def judge_body(**fields) -> dict:
    return {"team": "acme", "slug": "acme-grader", "title": "grader", "kind": "local", "score_format": "binary", **fields}


def test_a_local_judge_model_is_confined_like_a_run(world, host):
    admin = client_for(world.users["admin"])
    message = refused(post(admin, "/api/judges", judge_body(model="/etc/ssl")), "model")
    assert message.startswith("model directory '/etc/ssl' not found under the allowed model directories")
    assert "not found" in refused(post(admin, "/api/judges", judge_body(kind="similarity", model="/etc/ssl")), "model")
    assert Judge.objects.count() == JudgeConfig.objects.count() == 0
    r = post(admin, "/api/judges", judge_body(model=str(host.base)))
    assert r.status_code == 201, r.content
    # A new version is checked as well.
    message = refused(post(admin, "/api/judges/acme-grader/versions", {"model": str(host.outside)}), "model")
    assert "not found under the allowed model directories" in message
    assert JudgeConfig.objects.count() == 1


def test_a_judge_whose_model_is_refused_later_answers_judge_errors(world, host, settings):
    """A version saved while its directory was allowed, then the allow list narrowed: the worker's
    judge answers every request with the refusal (a judge_error), never loads the model."""
    from controlplane.review.services import judge_build
    from trainer.verifiers.judge import JudgeError, JudgeRequest

    r = post(client_for(world.users["admin"]), "/api/judges", judge_body(model=str(host.base)))
    assert r.status_code == 201, r.content
    settings.TEMPER_MODEL_DIRS = [host.outside]
    judge = judge_build(Judge.objects.get(slug="acme-grader").active)
    with pytest.raises(JudgeError, match="acme-grader v1 is refused: model directory .* not found"):
        judge(JudgeRequest("q", "a", None))


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "REDIS_URL", "TEMPER_JUDGE_ENDPOINTS", "DJANGO_SETTINGS_MODULE",
                                  "HOME", "AWS_SECRET_ACCESS_KEY"])
def test_api_key_env_must_be_on_the_allow_list(world, settings, name):
    settings.TEMPER_JUDGE_ENDPOINTS = {"vllm": "http://vllm:8000/v1"}
    admin = client_for(world.users["admin"])
    body = judge_body(kind="http", endpoint="vllm", model="judge-7b", api_key_env=name)
    message = refused(post(admin, "/api/judges", body), "api_key_env")
    assert message.startswith(f"{name!r} is not allowed: a judge's key variable must match TEMPER_JUDGE_KEY_ENVS")
    assert Judge.objects.count() == 0


def test_the_servers_secrets_stay_refused_whatever_the_allow_list_says(world, settings):
    settings.TEMPER_JUDGE_ENDPOINTS = {"vllm": "http://vllm:8000/v1"}
    settings.TEMPER_JUDGE_KEY_ENVS = ["*"]
    admin = client_for(world.users["admin"])
    assert "not allowed" in refused(post(admin, "/api/judges", judge_body(kind="http", endpoint="vllm", api_key_env="SECRET_KEY")),
                                    "api_key_env")
    assert post(admin, "/api/judges", judge_body(kind="http", endpoint="vllm", api_key_env="VENDOR_KEY")).status_code == 201


def test_allowed_key_variables(world, settings):
    settings.TEMPER_JUDGE_ENDPOINTS = {"vllm": "http://vllm:8000/v1"}
    admin = client_for(world.users["admin"])
    for i, name in enumerate(("TEMPER_JUDGE_KEY_VLLM", "OPENAI_API_KEY", "")):
        r = post(admin, "/api/judges", judge_body(slug=f"j{i}", kind="http", endpoint="vllm", api_key_env=name))
        assert r.status_code == 201, r.content
    r = post(admin, "/api/judges/j0/versions", {"api_key_env": "SECRET_KEY"})
    assert "not allowed" in refused(r, "api_key_env")
    assert JudgeConfig.objects.filter(judge__slug="j0").count() == 1


@pytest.mark.parametrize("name", ["TEMPER_JUDGE_KEY_", "TEMPER_JUDGE_KEY_X\n", "OPENAI_API_KEY\n", "\nOPENAI_API_KEY"])
def test_a_key_variable_must_add_to_a_prefix_and_carry_no_newline(world, settings, name):
    settings.TEMPER_JUDGE_ENDPOINTS = {"vllm": "http://vllm:8000/v1"}
    r = post(client_for(world.users["admin"]), "/api/judges", judge_body(kind="http", endpoint="vllm", api_key_env=name))
    assert r.status_code == 422, r.content
    assert [e["path"] for e in r.json()["errors"]] == ["api_key_env"]
    assert Judge.objects.count() == 0


def test_team_keys_are_for_the_teams_own_judges(world, settings):
    """With TEMPER_JUDGE_KEY_{TEAM}_*, acme's judges name TEMPER_JUDGE_KEY_ACME_*, never globex's
    key variables; a global judge names neither (only entries without {TEAM})."""
    settings.TEMPER_JUDGE_ENDPOINTS = {"vllm": "http://vllm:8000/v1"}
    settings.TEMPER_JUDGE_KEY_ENVS = ["TEMPER_JUDGE_KEY_{TEAM}_*", "OPENAI_API_KEY"]
    admin = client_for(world.users["admin"])
    ok = post(admin, "/api/judges", judge_body(slug="ours", kind="http", endpoint="vllm", api_key_env="TEMPER_JUDGE_KEY_ACME_VLLM"))
    assert ok.status_code == 201, ok.content
    message = refused(post(admin, "/api/judges", judge_body(slug="theirs", kind="http", endpoint="vllm",
                                                            api_key_env="TEMPER_JUDGE_KEY_GLOBEX_VLLM")), "api_key_env")
    assert "TEMPER_JUDGE_KEY_ACME_*" in message  # the list as it reads for this team
    assert "not allowed" in refused(post(admin, "/api/judges/ours/versions", {"api_key_env": "TEMPER_JUDGE_KEY_GLOBEX_VLLM"}),
                                    "api_key_env")
    theirs = client_for(world.other_users["admin"])
    assert post(theirs, "/api/judges", judge_body(slug="g", team="globex", kind="http", endpoint="vllm",
                                                  api_key_env="TEMPER_JUDGE_KEY_GLOBEX_VLLM")).status_code == 201
    from controlplane.review.services import api_key_env_error

    assert api_key_env_error("TEMPER_JUDGE_KEY_ACME_VLLM", None) is not None  # a global judge
    assert api_key_env_error("OPENAI_API_KEY", None) is None
    # a key variable the list no longer allows is refused when the judge is built, as for its model
    settings.TEMPER_JUDGE_KEY_ENVS = ["OPENAI_API_KEY"]
    from controlplane.common.model_refs import ModelRefused
    from controlplane.review.services import judge_spec

    with pytest.raises(ModelRefused, match="api_key_env"):
        judge_spec(Judge.objects.get(slug="ours").active)


# ----------------------------------------------------------------------------- judges across teams
JUDGED = {"stages": [{"type": "exact"}, {"type": "judge", "params": {"judge": "globex-judge", "threshold": 0.5}}]}


def globex_judge(world) -> Judge:
    judge = Judge.objects.create(team=world.other, slug="globex-judge", title="theirs")
    judge.active = JudgeConfig.objects.create(judge=judge, version=1, kind="similarity", score_format="binary")
    judge.save()
    return judge


def domain_body(**fields) -> dict:
    return {"team": "acme", "slug": "acme-judged", "title": "judged", "kind": "text", "task_source": {"family": "test"},
            "verifier": JUDGED, **fields}


def test_a_domain_cannot_name_another_teams_judge(world):
    globex_judge(world)
    admin = client_for(world.users["admin"])
    before = (Domain.objects.count(), DomainVersion.objects.count())
    theirs = refused(post(admin, "/api/domains", domain_body()), "verifier.stages[1].params.judge")
    missing_verifier = {"stages": [{"type": "exact"}, {"type": "judge", "params": {"judge": "nobody"}}]}
    missing = refused(post(admin, "/api/domains", domain_body(verifier=missing_verifier)), "verifier.stages[1].params.judge")
    assert theirs == "judge 'globex-judge' not found (a judge stage names a judge of this domain's team)"
    assert missing == theirs.replace("globex-judge", "nobody")
    # Editing an existing domain's verifier is held to the same rule, and keeps its version.
    r = client_for(world.users["admin"]).patch("/api/domains/acme-private", json.dumps({"verifier": JUDGED}),
                                               content_type="application/json")
    assert refused(r, "verifier.stages[1].params.judge") == theirs
    assert (Domain.objects.count(), DomainVersion.objects.count()) == before


def test_a_domain_names_its_own_teams_judge(world):
    judge = globex_judge(world)
    judge.team = world.team
    judge.save()
    r = post(client_for(world.users["admin"]), "/api/domains", domain_body())
    assert r.status_code == 201, r.content


def test_run_warnings_never_show_another_teams_judge(world):
    """A domain row naming another team's judge (written before this rule) warns as if the judge
    did not exist: the other team's version and calibration are not shown."""
    globex_judge(world)
    domain = factories.domain("acme-legacy", team_=world.team, verifier=JUDGED)
    run = factories.run(world.team, domains=[domain])
    warnings = run_warnings(run=run)
    assert warnings == ["domain acme-legacy uses judge 'globex-judge', which is not configured: its verifications are judge errors"]
    detail = client_for(world.users["member"]).get(f"/api/runs/{run.id}").json()
    assert detail["warnings"] == warnings and not any(" v1" in w for w in detail["warnings"])


def test_home_is_expanded_then_checked(world, host, monkeypatch):
    monkeypatch.setenv("HOME", str(host.root))
    assert resolve_model("~/tiny", team_id=world.team.id).path == str(host.base.resolve())
    monkeypatch.setenv("HOME", str(host.outside.parent))
    with pytest.raises(ModelRefused):
        resolve_model("~/outside", team_id=world.team.id)
    assert os.path.isdir(host.outside)


def test_the_worker_refuses_a_domain_row_naming_another_teams_judge(world):
    """A domain saved before judges were confined to its team would be verified by the other
    team's judge (the judge queue resolves judges by name): its run fails before it starts."""
    from workers.driver import drive

    globex_judge(world)
    upload = {"family": "jsonl", "tasks": [{"domain": "acme-legacy", "id": "1", "prompt": "q", "answer": "a"}]}
    domain = factories.domain("acme-legacy", team_=world.team, verifier=JUDGED, family="jsonl", task_source=upload)
    run = factories.run(world.team, domains=[domain], state="running", base_model="tiny-llama")
    assert drive(run.id, worker="test-worker") == "refused (a domain names another team's judge)"
    run.refresh_from_db()
    event = RunEvent.objects.get(run=run, kind="refused")
    assert run.state == RunState.FAILED
    assert event.data["errors"] == [{"path": "domains.acme-legacy.verifier.stages[1].params.judge",
                                     "message": "judge 'globex-judge' not found (a judge stage names a judge of the domain's team)"}]


def test_the_worker_refuses_a_pinned_version_it_cannot_run_naming_each_domain(world):
    """A version this worker cannot run (a slug neither in the trainer's catalogue nor an upload;
    a verifier naming a stage type this code lacks, saved by an older or newer release) fails the
    run before it starts, each problem at its domain's path, instead of an error inside the job."""
    from workers.driver import drive

    known = factories.domain("builtin-addition", team_=world.team)
    nowhere = factories.domain("acme-made-up", team_=world.team)
    newer = factories.domain("builtin-parity", team_=world.team, verifier={"stages": [{"type": "from-a-later-release"}]})
    run = factories.run(world.team, domains=[known, nowhere, newer], state="running", base_model="tiny-llama")
    assert drive(run.id, worker="test-worker") == "refused (a domain version it pins cannot run here)"
    run.refresh_from_db()
    errors = RunEvent.objects.get(run=run, kind="refused").data["errors"]
    assert run.state == RunState.FAILED
    assert errors[0] == {"path": "domains.acme-made-up",
                         "message": "domain 'acme-made-up': no task source (not in the trainer's catalogue and not an upload)"}
    assert [e["path"] for e in errors[1:]] == ["domains.builtin-parity.verifier.stages[0].type"]
    assert "from-a-later-release" in errors[1]["message"]


def test_a_version_row_pointing_at_another_teams_files_is_held_to_the_path_rules(world, host):
    """Rows written before the rules (a base registered from a run whose base_model was globex's
    registry copy, a version whose path was edited): only the registry's own copy of a version, or
    its own checkpoint's directory, is loaded from storage."""
    from controlplane.registry.services import version_is_stored

    theirs, copy, ckpt = globex_weights(world, host)
    base = ModelVersion.objects.create(team=world.team, kind="base", name="stolen", base="stolen", base_model=str(copy),
                                       path=str(copy))
    forged = ModelVersion.objects.create(team=world.team, name="forged@1/1", base="forged", base_model="x", step=1,
                                         path=str(ckpt))
    assert version_is_stored(theirs) and not version_is_stored(base) and not version_is_stored(forged)
    for version in (base, forged):
        with pytest.raises(ModelRefused, match="not found under the allowed model directories"):
            resolve_model(f"registry:{version.name}", team_id=world.team.id)
        assert "not found" in refused(post_run(world, base_model=f"registry:{version.id}"), "base_model")
    assert not Run.objects.filter(team=world.team).exclude(state="completed").exists()


def test_the_eval_worker_refuses_a_version_whose_files_are_not_its_teams(world, host):
    from controlplane.registry.models import EvalRun, EvalSuite, EvalSuiteVersion
    from workers.evaluate import run_eval

    _, copy, _ = globex_weights(world, host)
    stolen = ModelVersion.objects.create(team=world.team, kind="base", name="stolen", base="stolen", base_model=str(copy),
                                         path=str(copy))
    suite = EvalSuite.objects.create(slug="s", team=world.team)
    items = [{"domain": "addition", "domain_version": 1, "layer": "capability", "tasks": 1, "seed": 1, "samples": 1,
              "temperature": 0.0, "k": [1], "max_new_tokens": 2, "max_turns": 1, "max_episode_tokens": 8, "level": 0}]
    ev = EvalRun.objects.create(version=stolen, suite_version=EvalSuiteVersion.objects.create(suite=suite, version=1, items=items))
    assert run_eval(ev.pk, worker="test") == "failed"
    ev.refresh_from_db()
    assert ev.state == "failed" and "ModelRefused: model directory" in ev.error


@pytest.mark.parametrize("ref", ["/srv/m\x00/etc", "mo\udc80del", "registry:\x00"])
def test_names_no_file_system_can_hold_are_refused_not_crashed_on(world, ref):
    with pytest.raises(ModelRefused, match="holds a NUL or a character no file name can hold"):
        resolve_model(ref, team_id=world.team.id)
    errors = _model_ref_errors(world.team, "tiny-llama", {"tokenizer": {"path": ref}})
    assert [e.path for e in errors] == ["config.tokenizer.path"]


# ----------------------------------------------------------------------------- base models registered by an admin
def test_a_platform_admin_registers_a_base_model_every_team_names(world, host, tmp_path):
    """``base:<name>``: the admin's registration is the allow decision for that one directory (it
    need not lie under TEMPER_MODEL_DIRS); every team trains from it, and its checkpoints are
    named after it; the team's registry version of it resolves through it."""
    from controlplane.registry.models import BaseModel

    shared = model_dir(tmp_path / "srv" / "qwen")
    staff = client_for(world.staff)
    r = post(staff, "/api/registry/base-models", {"name": "qwen", "path": str(tmp_path / "srv" / "x" / ".." / "qwen"),
                                                  "description": "for every team"})
    assert r.status_code == 201, r.content
    assert r.json()["reference"] == "base:qwen" and r.json()["path"] == str(shared.resolve())
    listed = client_for(world.other_users["viewer"]).get("/api/registry/base-models").json()
    assert [b["reference"] for b in listed] == ["base:qwen"]

    for team, users in (("acme", world.users), ("globex", world.other_users)):
        payload = factories.run_payload(["addition"], team=team, base_model="base:qwen",
                                        config={"tokenizer": {"path": "base:qwen"}})
        r = post(client_for(users["member"]), "/api/runs", payload)
        assert r.status_code == 201, r.content
    resolved = resolve_model("base:qwen", team_id=world.team.id)
    assert (resolved.kind, resolved.path) == ("base", str(shared.resolve()))

    run = Run.objects.filter(team=world.team, base_model="base:qwen").get()
    ckpt = Checkpoint.objects.create(run=run, step=5, path=str(host.var / "checkpoints" / f"run-{run.id}" / "step-5"))
    version = ModelVersion.objects.get(checkpoint=ckpt)
    assert version.name == f"qwen@{run.id}/5" and version.parent.name == "qwen"
    assert resolve_model("registry:qwen", team_id=world.team.id).path == str(shared.resolve())
    assert BaseModel.objects.count() == 1


def test_registering_base_models_is_for_platform_admins_and_checked(world, host, tmp_path):
    from controlplane.registry.models import BaseModel

    shared = model_dir(tmp_path / "srv" / "qwen")
    team_admin = client_for(world.users["admin"])
    assert post(team_admin, "/api/registry/base-models", {"name": "qwen", "path": str(shared)}).status_code == 403
    staff = client_for(world.staff)
    version, copy, ckpt = globex_weights(world, host)
    for path in (copy, ckpt):  # another team's trained weights are shared through the registry, never by path
        assert "in the server's storage" in refused(post(staff, "/api/registry/base-models", {"name": "x", "path": str(path)}), "path")
    assert "no model at" in refused(post(staff, "/api/registry/base-models", {"name": "x", "path": "/etc/ssl"}), "path")
    assert not BaseModel.objects.exists()
    assert refused(post_run(world, base_model="base:nope"), "base_model").startswith("base model 'nope' not found")


def test_a_base_model_named_by_a_live_run_cannot_be_removed(world, host, tmp_path):
    from controlplane.registry.models import BaseModel

    shared = model_dir(tmp_path / "srv" / "qwen")
    staff = client_for(world.staff)
    assert post(staff, "/api/registry/base-models", {"name": "qwen", "path": str(shared)}).status_code == 201
    run = factories.run(world.team, base_model="base:qwen", state="running")
    assert staff.delete("/api/registry/base-models/qwen").status_code == 409
    Run.objects.filter(pk=run.pk).update(state="completed")
    assert client_for(world.users["admin"]).delete("/api/registry/base-models/qwen").status_code == 403
    assert staff.delete("/api/registry/base-models/qwen").json() == {"removed": "qwen"}
    assert not BaseModel.objects.exists()


# ----------------------------------------------------------------------------- ids that are not ASCII digits
NOT_ASCII_DIGITS = ["²", "①", "١٢", "v²", "٣"]
"""``str.isdigit`` is true of each (``int`` refuses the first two, reads the Arabic-Indic ones):
a reference is a row id only in ASCII digits, so each is a name here, and not found."""


@pytest.mark.parametrize("ref", NOT_ASCII_DIGITS)
def test_a_registry_reference_in_other_digits_is_a_name_not_found(world, ref):
    for pk in (2, 3, 12):  # the ids '²', '٣' and '١٢' would read as, were they taken for digits
        ModelVersion.objects.create(pk=pk, team=world.team, name=f"tiny@1/{pk}", base="tiny", base_model="/m", path="/nowhere")
    member = client_for(world.users["member"])
    for field, body in (("base_model", {"base_model": f"registry:{ref}"}),
                        ("config.tokenizer.path", {"config": {"tokenizer": {"path": f"registry:{ref}"}}})):
        r = post_run(world, **body)
        assert r.status_code == 422, r.content
        assert field in [e["path"] for e in r.json()["errors"]]
    r = post(client_for(world.users["admin"]), "/api/judges",
             {"team": "acme", "slug": "j", "title": "J", "kind": "similarity", "score_format": "binary", "model": f"registry:{ref}"})
    assert [e["path"] for e in r.json()["errors"]] == ["model"]
    assert post(member, "/api/registry/aliases/canary", {"version": ref}).status_code in (404, 422)
    assert member.get(f"/api/registry/evals?version={ref}").status_code in (200, 404, 422)
    assert member.get(f"/api/registry/compare?versions={ref},{ref}").status_code in (404, 422)
    assert member.get(f"/registry/compare/?run={ref}").status_code == 200
    assert Run.objects.count() == 0 and not Judge.objects.exists() and not Alias.objects.exists()
