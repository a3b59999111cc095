"""The lean forward computes exactly what the Hugging Face forward computes: logits, gradients,
and cached sampling, for Llama (with grouped-query attention) and Qwen2 (with q/k/v biases)."""
from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from trainer.config import load_config
from trainer.episodes import Trajectory
from trainer.batch import pack_responses
from trainer.job import Job
from trainer.models.lean import LeanLlama, unsupported
from trainer.models.load import load_model, load_tokenizer
from trainer.outcomes import Verification
from trainer.rollout.base import SamplingParams
from trainer.rollout.torch_engine import TorchEngine
from trainer.tasks.base import Task

SIZES = dict(vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=64)


def llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**SIZES, rope_theta=500.0)).eval()


def qwen2() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SIZES)).eval()
    with torch.no_grad():  # random biases, so that a lean path ignoring them would differ
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_()
    return model


MODELS = [llama, qwen2]
PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
"""Distinct prompts of different lengths (so left padding is exercised)."""


@pytest.mark.parametrize("make", MODELS)
def test_logits_equal_the_model_forward_on_right_padded_rows(make):
    model = make()
    lean = LeanLlama.wrap(model)
    ids = torch.randint(3, 50, (4, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # row 1 is right-padded
    ids[1, 6:] = 0
    expected = model(input_ids=ids, attention_mask=mask).logits
    got = lean.logits(ids)
    real = mask.bool()
    assert torch.allclose(got[real], expected[real], atol=1e-5)


@pytest.mark.parametrize("make", MODELS)
@pytest.mark.parametrize("packed_max_width", [512, 1])  # prompts and responses in one row, or two batches
def test_shared_prompt_scoring_equals_whole_sequences_and_has_the_same_gradients(make, packed_max_width, monkeypatch):
    monkeypatch.setattr("trainer.models.lean.PACKED_MAX_WIDTH", packed_max_width)
    model = make()
    lean = LeanLlama.wrap(model)
    rows = [1, 0, 2, 1, 0, 1]  # groups interleaved, as a minibatch split leaves them
    responses = [[20, 21, 22], [23], [24, 25], [26, 27, 28], [29], [30, 31]]
    trajs = [Trajectory(task=Task("d", str(r), ""), group=r, prompt_ids=PROMPTS[r], response_ids=resp,
                        loss_mask=[1] * len(resp), behaviour_logprobs=[0.0] * len(resp))
             for r, resp in zip(rows, responses)]
    batch = pack_responses(trajs, 0, "cpu")
    assert batch["prompts"].shape == (3, 6)  # each distinct prompt once, left-padded
    weights = torch.randn(len(rows), 3, 50)  # an arbitrary loss over the real response positions
    logits = lean.response_logits(batch["prompts"], batch["prompt_mask"], batch["rows"], batch["targets"],
                                  batch["response_mask"])
    lean_loss = (logits * weights * batch["loss_mask"][..., None]).sum()
    lean_loss.backward()
    lean_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    hf_loss = 0.0
    for b, t in enumerate(trajs):
        full = torch.tensor([t.prompt_ids + t.response_ids])
        p, r = len(t.prompt_ids), len(t.response_ids)
        expected = model(input_ids=full).logits[0, p - 1:p - 1 + r]  # (r, V)
        assert torch.allclose(logits[b, :r], expected, atol=1e-5), f"row {b}"
        hf_loss = hf_loss + (expected * weights[b, :r]).sum()
    hf_loss.backward()
    assert torch.allclose(lean_loss, hf_loss, atol=1e-4)
    for name, param in model.named_parameters():
        assert torch.allclose(lean_grads[name], param.grad, atol=1e-5), name


@pytest.mark.parametrize("make", MODELS)
def test_prefill_and_decode_give_the_logits_of_a_full_forward(make):
    model = make()
    lean = LeanLlama.wrap(model)
    rows = torch.tensor([0, 0, 1, 2, 2])
    longest = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in PROMPTS])
    cache, last = lean.prefill(ids, mask, room=3, rows=rows)
    fed = [list(PROMPTS[r]) for r in rows.tolist()]
    for step in range(3):
        for b, seq in enumerate(fed):
            expected = model(input_ids=torch.tensor([seq])).logits[0, -1]
            assert torch.allclose(last[b], expected, atol=1e-5), f"step {step} row {b}"
        tokens = torch.tensor([40 + step + b for b in range(len(fed))])
        for seq, tok in zip(fed, tokens.tolist()):
            seq.append(tok)
        last = lean.decode(tokens, cache)


def test_the_engine_samples_from_the_weights_of_the_last_update(base_config):
    """After an update by the job's optimizer (fused AdamW, which moves no tensor version counter),
    the engine's next prefill and decode compute the updated policy: nothing the sampler keeps
    between tokens may outlive a weight change."""
    job = Job(base_config, verify_batch=lambda items: [Verification.passed() if i % 2 else Verification.failed()
                                                       for i, _ in enumerate(items)])
    ids = torch.tensor([PROMPTS[1]])
    mask = torch.ones_like(ids)
    lean = job.engine.lean
    before = lean.prefill(ids, mask, room=2)[1][0]
    job.step()
    cache, after = lean.prefill(ids, mask, room=2)
    with torch.no_grad():
        expected = job.model(input_ids=ids).logits[0, -1]
        assert not torch.allclose(before, expected, atol=1e-6), "the step did not move the policy"
        assert torch.allclose(after[0], expected, atol=1e-5)
        following = lean.decode(torch.tensor([7]), cache)[0]
        assert torch.allclose(following, job.model(input_ids=torch.tensor([PROMPTS[1] + [7]])).logits[0, -1], atol=1e-5)
    job.close()


def test_the_engine_samples_the_same_tokens_with_and_without_the_lean_path(tiny_path):
    cfg = load_config({"model": {"path": tiny_path}})
    tok = load_tokenizer(cfg.model, cfg.tokenizer)
    model = load_model(tiny_path, cfg.model, torch.device("cpu"))
    prompts = [tok("3+4=")["input_ids"]] * 6 + [tok("rev(ab)=")["input_ids"]] * 4
    # a third of the vocabulary stops a sequence, so rows finish at different steps and the lean
    # path drops finished rows from its cache on the way
    stops = tuple(range(0, len(tok), 3))
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop_token_ids=stops)
    outputs = []
    for lean in (True, False):
        engine = TorchEngine(model, tok, seed=3, lean_forward=lean)
        assert (engine.lean is not None) is lean
        outputs.append(engine.generate(prompts, params))
    assert len({len(g.token_ids) for g in outputs[0]}) > 2
    for a, b in zip(*outputs):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_models_it_cannot_compute_exactly_are_refused_with_the_reason():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=64, n_layer=1, n_head=2))
    assert "model type 'gpt2'" in unsupported(gpt2)
    assert LeanLlama.wrap(gpt2) is None
    model = llama()
    model.gradient_checkpointing_enable()
    assert unsupported(model) == "gradient checkpointing is on"
    assert "not a Hugging Face model" in unsupported(torch.nn.Linear(2, 2))


def test_a_job_uses_the_lean_path_unless_told_not_to(base_config):
    assert Job(base_config).lean is not None
    off = Job({**base_config, "model": {**base_config["model"], "lean_forward": False}})
    assert off.lean is None and off.engine.lean is None
    metrics = off.step()  # the model's own forward trains as before
    assert metrics["mismatch/logprob_abs"] < 1e-4
