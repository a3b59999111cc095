"""Batched sampling with a KV cache in plain torch, on CPU or GPU.

Prompts are left-padded into one batch; each step feeds one token per sequence and reuses the
cache. Finished sequences keep feeding pad tokens (masked) until every sequence has stopped.
"""
from __future__ import annotations

import copy
import time

import torch
from transformers import DynamicCache

from trainer.rollout.base import Generation, SamplingParams


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (B, L) left-padded with ``pad_id`` and the attention mask (B, L)."""
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, length - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[row, length - len(p):] = 1
    return ids.to(device), mask.to(device)


def sample_tokens(logits: torch.Tensor, params: SamplingParams,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of ``logits`` (B, V); returns ids (B,) and their logprobs (B,).

    Logprobs are those of the tempered softmax (before top-p truncation), the distribution the
    trainer recomputes. Temperature 0 means greedy (logprobs of the untempered softmax).
    """
    if params.temperature == 0:
        logprobs = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
        ids = logprobs.argmax(-1)  # (B,)
        return ids, logprobs.gather(-1, ids[:, None]).squeeze(-1)
    logprobs = torch.log_softmax(logits.float() / params.temperature, dim=-1)  # (B, V)
    probs = logprobs.exp()
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)  # (B, V)
        drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    ids = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
    return ids, logprobs.gather(-1, ids[:, None]).squeeze(-1)


class TorchEngine:
    """Rollout engine that samples from a Hugging Face causal LM directly."""

    def __init__(self, model, tokenizer, *, seed: int = 0, batch_size: int = 256,
                 share_weights: bool = True, **_: object):
        self.model = model if share_weights else copy.deepcopy(model)
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.shares_weights = share_weights
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

    # -- interface -------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self._generate_batch(prompts[start:start + self.batch_size], params))
        return out

    def sync_weights(self, model) -> float:
        """Copy the policy's parameters into the engine's model in place (no-op when shared)."""
        t0 = time.perf_counter()
        if not self.shares_weights:
            with torch.no_grad():
                for dst, src in zip(self.model.parameters(), model.parameters()):
                    dst.copy_(src, non_blocking=True)
        return time.perf_counter() - t0

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

    # -- sampling --------------------------------------------------------------------------
    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        pad_id = self.tokenizer.pad_token_id
        stop = torch.tensor(sorted({self.tokenizer.eos_token_id, *params.stop_token_ids}),
                            device=self.device)
        ids, mask = left_pad(prompts, pad_id, self.device)  # (B, L), (B, L)
        batch = ids.shape[0]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, L)
        cache = DynamicCache()
        was_training = self.model.training
        self.model.eval()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True)
        next_pos = positions[:, -1] + 1  # (B,)
        tokens = torch.full((batch, params.max_new_tokens), pad_id, dtype=torch.long,
                            device=self.device)  # (B, N)
        logps = torch.zeros((batch, params.max_new_tokens), device=self.device)  # (B, N)
        done = torch.zeros(batch, dtype=torch.bool, device=self.device)
        lengths = torch.zeros(batch, dtype=torch.long, device=self.device)
        for t in range(params.max_new_tokens):
            tok, lp = sample_tokens(out.logits[:, -1, :], params, self.generator)  # (B,), (B,)
            tok = tok.masked_fill(done, pad_id)
            tokens[:, t] = tok
            logps[:, t] = lp.masked_fill(done, 0.0)
            lengths += (~done).long()
            done = done | torch.isin(tok, stop)
            if bool(done.all()) or t == params.max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=self.device)], 1)
            out = self.model(input_ids=tok[:, None], attention_mask=mask,
                             position_ids=next_pos[:, None], past_key_values=cache, use_cache=True)
            next_pos = next_pos + 1
        if was_training:
            self.model.train()
        return self._to_generations(tokens.cpu(), logps.cpu(), lengths.cpu(), done.cpu())

    def _to_generations(self, tokens, logps, lengths, done) -> list[Generation]:
        gens = []
        for row in range(tokens.shape[0]):
            n = int(lengths[row])
            ids = tokens[row, :n].tolist()
            gens.append(Generation(token_ids=ids, logprobs=logps[row, :n].tolist(),
                                   text=self.tokenizer.decode(ids, skip_special_tokens=True),
                                   finished=bool(done[row])))
        return gens
