"""The step-wise job: metrics, infrastructure masking, dynamic sampling, resume, CLI."""
from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
import torch

from trainer.config import ConfigError
from trainer.job import Job
from trainer.outcomes import Outcome, Verification
from trainer.pipeline import OverlappedPipeline, SyncPipeline
from trainer.catalogue.builtin import verify_exact


def record(into: list):
    def cb(step, metrics, samples):
        into.append((step, dict(metrics), samples))
    return cb


def alternate(items):
    return [Verification.passed() if i % 2 else Verification.failed() for i, _ in enumerate(items)]


def test_step_reports_metrics_and_samples(base_config):
    seen = []
    job = Job(base_config, callbacks=[record(seen)], verify_batch=alternate)
    metrics = job.step()
    assert job.step_count == 1 and seen[0][0] == 1 and seen[0][1] == metrics
    for key in ["reward/builtin-addition", "pass_rate/builtin-addition", "loss/policy",
                "policy/entropy", "policy/clip_frac", "policy/grad_norm", "policy/kl",
                "mismatch/logprob_abs", "mismatch/kl", "perf/tokens_per_s", "perf/completions_per_s",
                "perf/generator_idle_frac", "stage/generate_s", "stage/verify_s", "stage/update_s",
                "stage/sync_s", "response/length", "response/truncated_frac"]:
        assert key in metrics, key
    counts = sum(v for k, v in metrics.items() if k.startswith("outcome/builtin-addition/"))
    assert counts == 16
    assert metrics["mismatch/logprob_abs"] < 1e-3  # same weights generated and recomputed
    # on-policy: every importance weight is 1, so the batch is worth all its tokens
    assert abs(metrics["health/is_weight_mean"] - 1.0) < 1e-3 and metrics["health/is_weight_std"] < 1e-2
    assert metrics["health/ess"] > 0.999
    sample = seen[0][2][0]
    assert {"prompt", "completion", "reward", "outcome", "domain", "details"} <= set(sample)
    assert sample["domain"] == "builtin-addition" and sample["outcome"] in ("pass", "fail")


def test_a_batch_without_signal_takes_no_step_but_reports(base_config):
    job = Job(base_config, verify_batch=lambda items: [Verification.failed() for _ in items])
    before = [p.detach().clone() for p in job.model.parameters()]
    metrics = job.step()
    assert metrics["batch/skipped_update"] == 1.0 and metrics["policy/entropy"] > 0
    assert metrics["mismatch/logprob_abs"] < 1e-3 and metrics["health/ess"] > 0.999
    assert all(torch.equal(a, b) for a, b in zip(before, job.model.parameters()))


def test_infrastructure_outcomes_are_masked(base_config):
    calls = []

    def flaky(items):
        # every other completion: the sandbox failed; the rest pass when even-indexed in pairs
        out = []
        for i, (completion, task) in enumerate(items):
            calls.append(i)
            if i % 2:
                out.append(Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": "pool gone"}))
            else:
                out.append(Verification.passed() if i % 4 == 0 else Verification.failed())
        return out

    seen = []
    job = Job(base_config, callbacks=[record(seen)], verify_batch=flaky, samples_per_step=16)
    metrics = job.step()
    assert metrics["outcome/builtin-addition/sandbox_error"] == 8
    assert metrics["batch/infra_masked"] == 8
    assert metrics["reward/builtin-addition"] == pytest.approx(0.5)  # 4 pass of 8 valid, not 4/16
    samples = seen[0][2]
    infra = [s for s in samples if s["outcome"] == "sandbox_error"]
    assert len(infra) == 8 and all(s["reward"] is None and s["advantage"] == 0 for s in infra)
    scored = [s for s in samples if s["outcome"] != "sandbox_error"]
    assert all(s["advantage"] != 0 for s in scored)  # each group has one pass and one fail


def test_infrastructure_samples_do_not_change_the_update(base_config):
    """An update with masked samples equals one where those samples never existed."""
    def verdicts(items):
        return [Verification(Outcome.SANDBOX_ERROR) if i % 4 == 3 else
                (Verification.passed() if i % 2 else Verification.failed())
                for i, _ in enumerate(items)]

    job = Job(base_config, verify_batch=verdicts)
    twin = Job(base_config, verify_batch=verdicts)
    collect = twin._collect
    twin._collect = lambda metrics: [t for t in collect(metrics) if not t.verification.is_infrastructure]
    job.step()
    twin.step()
    for a, b in zip(job.model.parameters(), twin.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_dynamic_sampling_refill_is_bounded(base_config):
    base_config["algorithm"] = {"dynamic_sampling": True, "max_refills": 2}
    generated = []
    job = Job(base_config, verify_batch=lambda items: [Verification.failed() for _ in items])
    draw = job.sampler.draw
    job.sampler.draw = lambda k: generated.append(k) or draw(k)
    metrics = job.step()
    assert generated == [4, 4, 4]  # the batch and exactly max_refills refills, then give up
    assert metrics["batch/refills"] == 2 and metrics["batch/dropped_groups"] == 12
    assert "loss/policy" not in metrics  # nothing informative was left to train on


def test_dynamic_sampling_keeps_only_informative_groups(base_config):
    base_config["algorithm"] = {"dynamic_sampling": True, "max_refills": 3}
    state = {"n": 0}

    def some_flat(items):
        # groups arrive 4 samples at a time; every second group is all-fail
        out = []
        for _ in items:
            group, k = divmod(state["n"], 4)
            state["n"] += 1
            out.append(Verification.passed() if group % 2 and k == 0 else Verification.failed())
        return out

    seen = []
    job = Job(base_config, callbacks=[record(seen)], verify_batch=some_flat, samples_per_step=100)
    metrics = job.step()
    assert metrics["batch/refills"] >= 1
    adv_by_group = {}
    for s in seen[0][2]:
        adv_by_group.setdefault(s["task_id"] + str(s["prompt"]), []).append(s["advantage"])
    assert all(any(a != 0 for a in advs) for advs in adv_by_group.values())


def batch_signature(samples):
    return [(s["task_id"], s["completion"], s["outcome"]) for s in samples]


@pytest.mark.parametrize("staleness", [0, 1])
def test_resume_reproduces_the_next_batch(base_config, tmp_path, staleness):
    base_config["rollout"]["staleness"] = staleness
    base_config["sampler"] = {"adaptive_budget": True, "min_samples": 2, "max_samples": 6}
    straight = []
    job = Job(base_config, callbacks=[record(straight)], samples_per_step=200)
    job.step()
    job.step()
    job.save_checkpoint(tmp_path / "step-2")
    job.step()
    job.close()
    resumed_seen = []
    resumed = Job.resume(tmp_path / "step-2", callbacks=[record(resumed_seen)], samples_per_step=200)
    assert resumed.step_count == 2
    resumed.step()
    resumed.close()
    assert batch_signature(resumed_seen[0][2]) == batch_signature(straight[2][2])
    assert resumed_seen[0][1]["reward/builtin-addition"] == straight[2][1]["reward/builtin-addition"]
    assert resumed_seen[0][1]["batch/policy_version"] == straight[2][1]["batch/policy_version"] == 2 - staleness
    for a, b in zip(job.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_resume_reads_batches_ahead_saved_without_their_version(base_config, tmp_path):
    """Checkpoints from before batches kept their policy version: the i-th batch ahead was queued
    behind the sync of the update ``staleness - i`` steps before the checkpoint."""
    base_config["rollout"]["staleness"] = 1
    straight = []
    job = Job(base_config, callbacks=[record(straight)], verify_batch=alternate, samples_per_step=200)
    job.step()
    job.step()
    job.save_checkpoint(tmp_path / "step-2")
    job.step()
    job.close()
    rng = torch.load(tmp_path / "step-2" / "rng.pt", weights_only=False)
    rng["pending"] = [saved["trajs"] for saved in rng["pending"]]
    torch.save(rng, tmp_path / "step-2" / "rng.pt")
    resumed_seen = []
    resumed = Job.resume(tmp_path / "step-2", callbacks=[record(resumed_seen)], verify_batch=alternate,
                         samples_per_step=200)
    resumed.step()
    resumed.close()
    assert resumed_seen[0][1]["batch/policy_version"] == straight[2][1]["batch/policy_version"] == 1
    assert batch_signature(resumed_seen[0][2]) == batch_signature(straight[2][2])


def test_resume_continues_the_sft_stage(base_config, tmp_path):
    base_config["sft"] = {"steps": 0, "lr": 3e-3, "batch_size": 8}
    job = Job(base_config)
    job.sft(2)
    job.save_checkpoint(tmp_path / "sft")
    straight = job.sft(2)
    resumed = Job.resume(tmp_path / "sft")
    assert resumed.sft_steps_done == 2
    assert resumed.sft(2) == pytest.approx(straight, abs=1e-6)  # same tasks, same optimizer state
    assert resumed.sft_steps_done == job.sft_steps_done == 4


def test_sft_stage_lowers_loss(base_config):
    base_config["sft"] = {"steps": 0, "lr": 3e-3, "batch_size": 32}
    job = Job(base_config)
    losses = job.sft(30)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5


def test_sft_micro_batches_give_the_whole_batchs_gradient_and_sequences_stay_bounded(base_config):
    """An SFT step ran one forward over every task of ``sft.batch_size`` at whatever length the
    tasks had (4,096 tasks of an upload with long prompts: one pass over all of them). It takes
    ``optimizer.micro_batch_size`` tasks at a time, with the same gradient, and cuts prompts and
    answers to the trainer's token bounds."""
    from trainer.sft import sft_batch, sft_step
    from trainer.tasks.base import Task

    job = Job(base_config)
    tasks = [Task("d", str(i), "x" * (3 + 7 * i), "12345678"[: 1 + i]) for i in range(6)]

    class Grads:  # a backend that keeps the gradient of the step instead of stepping
        def backward(self, loss):
            loss.backward()

        def step(self):
            self.grads = [p.grad.detach().clone() for p in job.model.parameters() if p.grad is not None]
            job.model.zero_grad(set_to_none=True)

    whole, micro = Grads(), Grads()
    loss_whole = sft_step(job.model, whole, job.tokenizer, tasks, job.device)
    loss_micro = sft_step(job.model, micro, job.tokenizer, tasks, job.device, micro_batch_size=4)
    assert loss_micro == pytest.approx(loss_whole, rel=1e-5)
    assert len(whole.grads) == len(micro.grads) > 0
    for a, b in zip(whole.grads, micro.grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

    batch = sft_batch(job.tokenizer, tasks, job.device, max_prompt_tokens=5, max_new_tokens=3)
    assert batch["input_ids"].shape[1] <= 5 + 3
    assert int((batch["labels"] != -100).sum(dim=1).max()) <= 3


def test_unknown_domain_and_missing_model_name_the_field(base_config):
    with pytest.raises(ConfigError) as info:
        Job({**base_config, "domains": {"no-such-domain": 1.0}})
    assert info.value.errors == [("domains.no-such-domain", "unknown domain")]
    with pytest.raises(ConfigError) as info:
        Job({**base_config, "model": {"path": ""}})
    assert info.value.errors[0][0] == "model.path"


@pytest.mark.parametrize("optimizer, path", [({"zero_stage": 2}, "optimizer.zero_stage"),
                                             ({"backend": "deepspeed"}, "optimizer.backend")])
def test_deepspeed_without_its_package_is_a_field_error(base_config, monkeypatch, optimizer, path):
    """DeepSpeed runs on CPU ranks too (tests/trainer/test_deepspeed.py); only a missing package
    refuses it, at the field that asked for it, saying how to install it."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError
    base_config["optimizer"].update(optimizer)
    with pytest.raises(ConfigError) as info:
        Job(base_config)
    (where, message), = info.value.errors
    assert where == path and "requirements/deepspeed.txt" in message


def test_rloo_and_kl_and_sequence_aggregation_run(base_config):
    base_config["algorithm"] = {"name": "rloo", "kl_coef": 0.05, "loss_aggregation": "sequence",
                                "updates_per_batch": 2}
    alternate = lambda items: [Verification.passed() if i % 2 else Verification.failed()
                               for i, _ in enumerate(items)]
    job = Job(base_config, verify_batch=alternate)
    job.step()
    metrics = job.step()
    assert metrics["policy/kl"] > 0  # the policy moved away from the frozen reference


def test_cli_runs_a_job_and_reports_config_errors(base_config, tmp_path):
    base_config["checkpoint"] = {"dir": str(tmp_path / "ckpt"), "every_steps": 1, "keep_last": 2}
    base_config["limits"]["max_steps"] = 3
    (tmp_path / "run.json").write_text(json.dumps(base_config))
    out = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "run.json"),
                          "--no-progress", "--threads", "1", "--metrics-jsonl", str(tmp_path / "m.jsonl")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["steps"] == 3
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-2", "step-3"]
    ckpt = tmp_path / "ckpt" / "step-3"
    assert {"model", "optimizer.pt", "rng.pt", "state.json"} <= {p.name for p in ckpt.iterdir()}
    assert json.loads((ckpt / "state.json").read_text())["step"] == 3
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 3
    (tmp_path / "bad.yaml").write_text("model: {path: x}\nalgorithm: {clip_high: 0}\n")
    bad = subprocess.run([sys.executable, "-m", "trainer", "run", str(tmp_path / "bad.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "algorithm.clip_high: must be greater than 0" in bad.stderr


# ----------------------------------------------------------------------------- the pipeline
def flat(params) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in params]).clone()


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_each_batch_is_generated_by_a_policy_at_most_staleness_updates_old(base_config, staleness):
    """The recorded policy version of every trained batch is min(step, staleness) updates behind,
    and it is the truth: the engine's weights at generation equal the policy after that many updates."""
    base_config["rollout"]["staleness"] = staleness
    policies, seen = [], []
    job = Job(base_config, callbacks=[lambda step, metrics, samples: (seen.append(dict(metrics)),
                                                                       policies.append(flat(job.model.parameters())))],
              verify_batch=alternate)
    policies.append(flat(job.model.parameters()))  # version 0
    engine_weights = []  # one per generated batch, in generation order (the rollout thread's)
    generate = job.engine.generate
    job.engine.generate = lambda prompts, params: (engine_weights.append(flat(job.engine.model.parameters())),
                                                   generate(prompts, params))[1]
    for _ in range(5):
        job.step()
    job.close()
    versions = [int(m["batch/policy_version"]) for m in seen]
    assert versions == [max(0, k - staleness) for k in range(5)]
    assert [int(m["batch/policy_lag"]) for m in seen] == [min(k, staleness) for k in range(5)]
    assert len(engine_weights) >= 5  # (batches queued ahead may be dropped by close)
    for k, version in enumerate(versions):
        assert torch.equal(engine_weights[k], policies[version]), f"batch {k} was not generated by version {version}"
    assert all(not torch.equal(policies[v], policies[v + 1]) for v in range(5))  # every update moved the policy


def test_with_staleness_the_next_batch_is_verified_while_the_current_one_trains(base_config):
    base_config["rollout"]["staleness"] = 1
    second_verification = threading.Event()
    calls = []

    def verify(items):
        calls.append(len(items))
        if len(calls) == 2:
            second_verification.set()
        return alternate(items)

    job = Job(base_config, verify_batch=verify)
    assert isinstance(job.pipeline, OverlappedPipeline) and not job.engine.shares_weights
    update, during_first_update = job._update, []

    def watched_update(trajs, adv, metrics):
        if job.step_count == 0:  # batch 2 is generated and verified by the pipeline meanwhile
            during_first_update.append(second_verification.wait(timeout=120))
        return update(trajs, adv, metrics)

    job._update = watched_update
    metrics = job.step()
    job.close()
    assert during_first_update == [True]
    for stage in ("generate", "verify", "update"):
        assert 0 <= metrics[f"pipeline/{stage}_busy_s"] <= metrics["pipeline/window_s"]
        assert metrics[f"pipeline/{stage}_idle_frac"] == pytest.approx(
            1 - metrics[f"pipeline/{stage}_busy_s"] / metrics["pipeline/window_s"])
    assert metrics["perf/generator_idle_frac"] == metrics["pipeline/generate_idle_frac"]


def test_without_staleness_each_step_generates_verifies_and_updates_in_turn(base_config):
    calls = []
    job = Job(base_config, verify_batch=lambda items: calls.append(len(items)) or alternate(items))
    update, verified_before_update = job._update, []
    job._update = lambda *a: (verified_before_update.append(len(calls)), update(*a))[1]
    generate = job.engine.generate
    job.engine.generate = lambda prompts, params: (verified_before_update.append(("generate", len(calls))),
                                                   generate(prompts, params))[1]
    for _ in range(3):
        job.step()
    assert verified_before_update == [("generate", 0), 1, ("generate", 1), 2, ("generate", 2), 3]
    assert isinstance(job.pipeline, SyncPipeline) and job.engine.shares_weights


def test_completions_are_verified_as_soon_as_each_engine_batch_is_generated(base_config):
    """With rollout.batch_size below the batch, verification of the first chunk starts before the
    last chunk is generated."""
    base_config["rollout"].update(staleness=1, batch_size=4)  # 4 tasks x 4 completions: 4 chunks
    first_chunk_verified = threading.Event()
    chunks = []

    def verify(items):
        chunks.append(len(items))
        first_chunk_verified.set()
        return alternate(items)

    job = Job(base_config, verify_batch=verify)
    generate, waited = job.engine.generate, []

    def watched_generate(prompts, params):
        if len(waited) == 3:  # about to generate the first batch's last chunk
            waited.append(first_chunk_verified.wait(timeout=120))
        else:
            waited.append(None)
        return generate(prompts, params)

    job.engine.generate = watched_generate
    metrics = job.step()
    job.close()
    assert waited[3] is True
    assert chunks[:4] == [4, 4, 4, 4] and metrics["batch/completions"] == 16


def _slow_parity(release: threading.Event):
    """A verify_batch whose builtin-parity verifications wait for ``release`` (a slow lane)."""
    def verify(items):
        if any(task.domain == "builtin-parity" for _, task in items):
            assert release.wait(timeout=300), "the test never released the slow verifications"
        return alternate(items)
    return verify


def test_a_budget_trains_on_what_is_verified_and_carries_the_rest_to_the_next_step(base_config, tmp_path):
    """With rollout.verify_budget_s, a step whose slow domain is still verifying when the budget
    runs out trains on the groups verified by then; the late groups join the next step, one update
    staler and never beyond the staleness bound (there they are waited for, budget or not); group
    ids stay distinct; a checkpoint keeps the carried groups and a resumed job trains on them."""
    base_config["domains"] = {"builtin-addition": 1.0, "builtin-parity": 1.0}
    base_config["rollout"].update(staleness=1, verify_budget_s=2.0, prompts_per_step=8, batch_size=4)
    release = threading.Event()
    job = Job(base_config, verify_batch=_slow_parity(release))
    assert job.pipeline.lookahead == 0  # one batch fewer ahead: a carried group is then 1 update old
    first = job.step()
    trained = {t.task.domain for t in job.last_generated}
    assert trained == {"builtin-addition"}, "the step waited for the slow domain past its budget"
    late = int(first["batch/groups_carried_out"])
    assert late >= 1 and first["batch/groups_carried_in"] == 0
    assert first["batch/policy_lag"] == 0

    # the carried groups reach their bound at the next step: it waits for them past the budget
    done = threading.Event()
    result = {}
    runner = threading.Thread(target=lambda: (result.update(m=job.step()), done.set()))
    runner.start()
    assert not done.wait(timeout=3 * job.config.rollout.verify_budget_s), "a group past its bound was dropped or skipped"
    release.set()
    runner.join(timeout=300)
    second = result["m"]
    assert second["batch/groups_carried_in"] == late
    assert second["batch/groups_carried_out"] == 0  # released: every verification came back
    assert second["batch/policy_lag"] == 1 == job.config.rollout.staleness
    groups = [t.group for t in job.last_generated]
    assert "builtin-parity" in {t.task.domain for t in job.last_generated}
    assert len(set(groups)) == second["batch/groups_generated"] == late + 8  # ids never collide

    release.clear()  # slow again: step 3 carries parity groups, and a checkpoint keeps them
    third = job.step()
    carried = int(third["batch/groups_carried_out"])
    assert carried >= 1
    release.set()
    job.save_checkpoint(tmp_path / "ckpt")
    job.close()
    resumed = Job.resume(tmp_path / "ckpt", verify_batch=_slow_parity(release))
    fourth = resumed.step()
    resumed.close()
    assert fourth["batch/groups_carried_in"] == carried
    assert fourth["batch/policy_lag"] == 1
    assert len({t.group for t in resumed.last_generated}) == fourth["batch/groups_generated"]


def test_a_verification_budget_needs_an_overlapped_pipeline(base_config):
    base_config["rollout"].update(staleness=0, verify_budget_s=5.0)
    with pytest.raises(ConfigError) as info:
        Job(base_config)
    assert [path for path, _ in info.value.errors] == ["rollout.verify_budget_s"]


def test_a_weight_sync_that_fails_on_the_rollout_thread_fails_the_next_step(base_config):
    """Overlapped, the sync runs on the rollout thread behind queued generations; if it fails
    (vLLM could not empty its prefix cache, say), the step that takes a batch generated after it
    fails with that error instead of training on what the wrong weights generated."""
    base_config["rollout"]["staleness"] = 1
    job = Job(base_config, verify_batch=alternate)
    try:
        job.step()
        job.engine.sync_weights = lambda model: (_ for _ in ()).throw(RuntimeError("prefix cache not emptied"))
        with pytest.raises(RuntimeError, match="prefix cache not emptied"):
            for _ in range(3):
                job.step()
    finally:
        job.close()


def test_domain_balance_weighs_each_domain_alike_in_the_update(base_config):
    """With ``algorithm.domain_balance: equal`` a step reports each domain's weight, the weights
    times each domain's trained tokens are equal, and the update runs on them."""
    base_config["domains"] = {"builtin-addition": 1.0, "builtin-parity": 1.0}
    base_config["rollout"].update(prompts_per_step=8, max_new_tokens=6)
    base_config["algorithm"] = {"domain_balance": "equal"}
    job = Job(base_config, verify_batch=lambda items: [Verification.passed() if i % 3 else Verification.failed()
                                                      for i, _ in enumerate(items)])
    try:
        metrics = job.step()
        tokens: dict[str, float] = {}
        for t in job.last_trained:
            tokens[t.task.domain] = tokens.get(t.task.domain, 0.0) + sum(t.loss_mask)
        weighted = {d: metrics[f"batch/domain_weight/{d}"] * n for d, n in tokens.items()}
        assert len(weighted) == 2
        assert weighted["builtin-addition"] == pytest.approx(weighted["builtin-parity"])
        assert sum(weighted.values()) == pytest.approx(sum(tokens.values()))
        assert metrics["policy/grad_norm"] > 0
    finally:
        job.close()


def test_sft_until_pass_rate_takes_each_domain_to_the_rate_and_back_when_it_forgets(base_config, monkeypatch):
    """``sft.until_pass_rate``: a domain at the rate leaves the stage (its tasks are no longer
    drawn), one that falls below it again comes back, and the stage ends when every domain is at
    the rate in one check; the checks sample training tasks only, at the domain's level."""
    from trainer.holdout import is_heldout

    base_config["domains"] = {"builtin-addition": 1.0, "builtin-reversal": 1.0}
    base_config["sft"] = {"steps": 200, "lr": 1e-3, "batch_size": 8, "until_pass_rate": 0.5, "check_every": 5,
                          "check_tasks": 4}
    job = Job(base_config)
    # each domain's pass rate at each check, scripted: addition reaches the rate at the 2nd check and
    # forgets at the 3rd; reversal reaches it at the 4th; addition again at the 5th, and the stage ends
    script = {"builtin-addition": iter([0.0, 0.5, 0.25, 0.25, 1.0]), "builtin-reversal": iter([0.0, 0.0, 0.25, 0.5, 0.5])}
    checked, drawn = [], []

    def evaluate(tasks, *, greedy=True, n=1):
        assert not greedy and {t.domain for t in tasks} and len({t.domain for t in tasks}) == 1
        assert not any(is_heldout(t, job.sampler.cfg.holdout_fraction) for t in tasks)
        domain = tasks[0].domain
        checked.append((job.sft_steps_done, domain))
        return {"exact": next(script[domain]), "reward": 0.0}

    original = job.sampler.sample_task
    monkeypatch.setattr(job, "evaluate", evaluate)
    monkeypatch.setattr(job.sampler, "sample_task", lambda slug, rng: drawn.append((job.sft_steps_done, slug)) or original(slug, rng))
    try:
        losses = job.sft()
    finally:
        job.close()
    assert [step for step, d in checked if d == "builtin-addition"] == [0, 5, 10, 15, 20]
    assert len(losses) == 20 and job.sft_steps_done == 20 and job.sft_done  # not the 200 steps it was given
    training = [(step, slug) for step, slug in drawn if (step, slug) not in set(checked)]
    # steps 5-9: addition was out; 10-14: it forgot and came back; 15-19: reversal out, addition back in
    assert {slug for step, slug in training if 5 <= step < 10} == {"builtin-reversal"}
    assert {slug for step, slug in training if 10 <= step < 15} == {"builtin-addition", "builtin-reversal"}
    assert {slug for step, slug in training if 15 <= step < 20} == {"builtin-addition"}
    assert job.sft_stage.left == {"builtin-reversal": {"step": 15, "pass_rate": 0.5},
                                  "builtin-addition": {"step": 20, "pass_rate": 1.0}}


def test_sft_until_pass_rate_stops_a_real_stage_at_the_rate_and_its_state_resumes(base_config, tmp_path):
    """With the real checks (the tiny model sampling addition's training tasks), the stage stops
    once the rate is reached, long before its steps, and a checkpoint keeps who left and when."""
    base_config["sft"] = {"steps": 2000, "lr": 3e-3, "batch_size": 32, "until_pass_rate": 0.3, "check_every": 10,
                          "check_tasks": 32}
    job = Job(base_config)
    try:
        job.sft()
        left = job.sft_stage.left
        assert set(left) == {"builtin-addition"} and left["builtin-addition"]["pass_rate"] >= 0.3
        assert left["builtin-addition"]["step"] == job.sft_steps_done < 2000 and job.sft_done
        job.save_checkpoint(tmp_path / "ckpt")
        resumed = Job.resume(tmp_path / "ckpt")
        assert resumed.sft_stage.left == left and resumed.sft_done
        assert resumed.sft_stage.check_rng.getstate() == job.sft_stage.check_rng.getstate()
        resumed.close()
    finally:
        job.close()


def test_sft_checks_each_step_once_however_the_stage_is_split_or_resumed(base_config, tmp_path, monkeypatch):
    """A check at a step boundary is not repeated by the next call or by a resumed job (it would
    draw other check tasks and could reverse a domain's leave)."""
    base_config["sft"] = {"steps": 40, "lr": 1e-3, "batch_size": 4, "until_pass_rate": 0.9, "check_every": 5,
                          "check_tasks": 2}

    def counting(job, seen):
        def evaluate(tasks, *, greedy=True, n=1):
            seen.append(job.sft_steps_done)
            return {"exact": 0.0, "reward": 0.0}  # never at the rate: every boundary is checked
        monkeypatch.setattr(job, "evaluate", evaluate)

    job, seen = Job(base_config), []
    counting(job, seen)
    job.sft(10)
    job.sft(10)
    assert seen == [0, 5, 10, 15, 20]
    job.save_checkpoint(tmp_path / "sft")
    resumed, again = Job.resume(tmp_path / "sft"), []
    counting(resumed, again)
    resumed.sft(10)
    assert again == [25, 30] and resumed.sft_stage.checked_at == 30
    job.close()
    resumed.close()
