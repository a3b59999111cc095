"""Multi-turn episodes: environment tokens are in the trajectory but masked out of the loss."""
from __future__ import annotations

import pytest

import torch

from trainer import catalogue
from trainer.config import load_config
from trainer.environments import RetryEnv
from trainer.episodes import multi_turn
from trainer.batch import pack_batch
from trainer.job import Job
from trainer.models.load import load_model, load_tokenizer
from trainer.rollout.base import SamplingParams
from trainer.rollout.torch_engine import TorchEngine
from trainer.catalogue.builtin import ADDITION, EXACT_MATCH_SPEC, AdditionSource, verify_exact

SLUG = "test-retry-addition"
SPEC = catalogue.DomainSpec(slug=SLUG, title="Addition with retries", kind="math", family="test",
                           source=AdditionSource(slug=SLUG), verifier_spec=EXACT_MATCH_SPEC,
                           environment=lambda task: RetryEnv(verify_exact, max_tries=3))


@pytest.fixture(autouse=True, scope="module")
def _registered():
    """The test domain exists only while these tests run (the registry is process-wide)."""
    catalogue.register(SPEC)
    yield
    catalogue.unregister(SLUG)


def test_environment_tokens_are_masked(tiny_path):
    cfg = load_config({"model": {"path": tiny_path}})
    tok = load_tokenizer(cfg.model, cfg.tokenizer)
    engine = TorchEngine(load_model(tiny_path, cfg.model, torch.device("cpu")), tok, seed=0)
    tasks = [(ADDITION.make(a, 3), 4, a) for a in range(4)]
    trajs = multi_turn(engine, tok, tasks, SamplingParams(max_new_tokens=3),
                       lambda task: RetryEnv(verify_exact, max_tries=3), max_turns=3,
                       max_episode_tokens=40, max_prompt_tokens=64)
    assert len(trajs) == 16
    assert any(t.turns > 1 for t in trajs)  # a random model gets answers wrong: retries happen
    for t in trajs:
        assert len(t.response_ids) == len(t.loss_mask) == len(t.behaviour_logprobs) <= 40
        assert t.turns <= 3 and t.verification is not None
        # the masked spans are exactly the environment's words, one per extra turn
        spans, current = [], []
        for tok_id, m in zip(t.response_ids, t.loss_mask):
            if m == 0:
                current.append(tok_id)
            elif current:
                spans.append(current)
                current = []
        if current:
            spans.append(current)
        assert [tok.decode(s) for s in spans] == [f" no. {t.task.prompt}"] * (t.turns - 1)
        assert all(lp == 0.0 for lp, m in zip(t.behaviour_logprobs, t.loss_mask) if m == 0)
    batch = pack_batch(trajs, tok.pad_token_id, "cpu")
    assert batch["loss_mask"].sum() == sum(sum(t.loss_mask) for t in trajs)
    assert batch["loss_mask"].sum() < sum(len(t.response_ids) for t in trajs)


def test_turn_and_token_budgets_cut_episodes(tiny_path):
    cfg = load_config({"model": {"path": tiny_path}})
    tok = load_tokenizer(cfg.model, cfg.tokenizer)
    engine = TorchEngine(load_model(tiny_path, cfg.model, torch.device("cpu")), tok, seed=1)
    never = lambda task: RetryEnv(lambda c, t: verify_exact("wrong", t), max_tries=99)  # noqa: E731
    trajs = multi_turn(engine, tok, [(ADDITION.make(1, 1), 8, 0)], SamplingParams(max_new_tokens=3),
                       never, max_turns=2, max_episode_tokens=100, max_prompt_tokens=64)
    assert all(t.turns == 2 and t.truncated and t.verification.outcome.value == "fail" for t in trajs)
    short = multi_turn(engine, tok, [(ADDITION.make(1, 1), 8, 0)], SamplingParams(max_new_tokens=3),
                       never, max_turns=50, max_episode_tokens=12, max_prompt_tokens=64)
    assert all(len(t.response_ids) <= 12 and t.truncated for t in short)


def test_job_trains_on_a_multi_turn_domain(base_config):
    base_config["domains"] = {SLUG: 1.0}
    base_config["rollout"].update(max_turns=3, max_episode_tokens=40)
    seen = []
    job = Job(base_config, callbacks=[lambda s, m, samples: seen.append((m, samples))])
    metrics = job.step()
    assert f"reward/{SLUG}" in metrics
    assert max(s["turns"] for s in seen[0][1]) > 1
    assert metrics["mismatch/logprob_abs"] < 1e-3  # environment tokens are not compared either
