"""The torch engine: logprobs equal the trainer's recomputation; padding does not change results."""
from __future__ import annotations

import torch

from trainer.algorithms import token_logprobs
from trainer.episodes import Trajectory
from trainer.batch import pack_batch
from trainer.models.load import load_model, load_tokenizer
from trainer.config import load_config
from trainer.rollout.base import SamplingParams
from trainer.rollout.torch_engine import TorchEngine
from trainer.tasks.base import Task


def setup(path):
    cfg = load_config({"model": {"path": path}})
    tok = load_tokenizer(cfg.model, cfg.tokenizer)
    return load_model(path, cfg.model, torch.device("cpu")), tok


def test_sampled_logprobs_match_a_full_forward(tiny_path):
    model, tok = setup(tiny_path)
    engine = TorchEngine(model, tok, seed=1)
    prompts = [tok("3+4=")["input_ids"], tok("rev(abcd)=")["input_ids"], tok("1+1=")["input_ids"]]
    for temperature in (1.0, 0.7):
        gens = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=temperature))
        trajs = [Trajectory(task=Task("d", str(i), ""), group=i, prompt_ids=p,
                            response_ids=g.token_ids, loss_mask=[1] * len(g.token_ids),
                            behaviour_logprobs=g.logprobs) for i, (p, g) in enumerate(zip(prompts, gens))]
        batch = pack_batch(trajs, tok.pad_token_id, "cpu")
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logp = token_logprobs(logits[:, :-1], batch["targets"], temperature)  # (B, T-1)
        m = batch["loss_mask"]
        assert m.sum() == sum(len(g.token_ids) for g in gens)
        assert torch.allclose(logp * m, batch["old_logp"], atol=1e-4)


def test_left_padding_does_not_change_greedy_output(tiny_path):
    model, tok = setup(tiny_path)
    engine = TorchEngine(model, tok)
    prompts = [tok(p)["input_ids"] for p in ["7+8=", "par(010011)=", "rev(ab)="]]
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    together = engine.generate(prompts, greedy)
    alone = [engine.generate([p], greedy)[0] for p in prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    for a, b in zip(together, alone):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_rng_state_round_trip_repeats_samples(tiny_path):
    model, tok = setup(tiny_path)
    engine = TorchEngine(model, tok, seed=3)
    prompts = [tok("2+2=")["input_ids"]] * 8
    state = engine.state_dict()
    first = [g.token_ids for g in engine.generate(prompts, SamplingParams(max_new_tokens=4))]
    engine.load_state_dict(state)
    again = [g.token_ids for g in engine.generate(prompts, SamplingParams(max_new_tokens=4))]
    assert first == again
    assert len({tuple(t) for t in first}) > 1  # really sampling


def test_stop_token_ends_and_truncation_is_flagged(tiny_path):
    model, tok = setup(tiny_path)
    engine = TorchEngine(model, tok, seed=0)
    gens = engine.generate([tok("1+2=")["input_ids"]] * 32, SamplingParams(max_new_tokens=3))
    for g in gens:
        assert len(g.token_ids) == len(g.logprobs) <= 3
        assert g.finished == (g.token_ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in g.token_ids[:-1]


def test_ignore_eos_samples_every_sequence_to_its_length(tiny_path):
    """A benchmark's equal work per sample: stop tokens are sampled through, never truncated early."""
    model, tok = setup(tiny_path)
    prompts = [tok("1+2=")["input_ids"]] * 32
    stopped = TorchEngine(model, tok, seed=0).generate(prompts, SamplingParams(max_new_tokens=24))
    assert any(g.finished for g in stopped)  # the untrained model does sample its eos token
    gens = TorchEngine(model, tok, seed=0).generate(prompts, SamplingParams(max_new_tokens=24, ignore_eos=True))
    assert all(len(g.token_ids) == len(g.logprobs) == 24 and not g.finished for g in gens)
    assert any(tok.eos_token_id in g.token_ids for g in gens)
