"""Batched sampling with a KV cache in plain torch, on CPU or GPU.

Prompts are left-padded into one batch; each step feeds one token per sequence and reuses the
cache. Finished sequences keep feeding pad tokens (masked) until every sequence has stopped.
Llama-family models run through :mod:`trainer.models.lean`, which computes each distinct prompt
once for all the samples drawn from it (the ``n`` of a group); others through their own forward
with a Hugging Face ``DynamicCache``.
"""
from __future__ import annotations

import copy
import time

import torch
from transformers import DynamicCache

from trainer.models.lean import LeanLlama, distinct_prompts, left_pad, left_positions
from trainer.rollout.base import Generation, SamplingParams


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
    # inverse-CDF sampling: the first token whose cumulative probability reaches u ~ U(0, total]
    # (exactly multinomial sampling, in three vectorised ops)
    cdf = probs.cumsum(-1)  # (B, V)
    u = (1.0 - torch.rand((probs.shape[0], 1), generator=generator, device=probs.device)) * cdf[:, -1:]
    ids = (cdf < u).sum(-1)  # (B,)
    return ids, logprobs.gather(-1, ids[:, None]).squeeze(-1)


class TorchEngine:
    """Rollout engine that samples from a Hugging Face causal LM directly."""

    def __init__(self, model, tokenizer, *, seed: int = 0, batch_size: int = 256,
                 share_weights: bool = True, lean_forward: bool = True, **_: object):
        self.model = model if share_weights else copy.deepcopy(model)
        self.lean = LeanLlama.wrap(self.model) if lean_forward else None
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
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            if self.lean is not None:
                result = self._sample_lean(prompts, params)
            else:
                result = self._sample_hf(prompts, params)
        finally:
            if was_training:
                self.model.train()
        return self._to_generations(*result)

    def _sample_lean(self, prompts: list[list[int]], params: SamplingParams):
        """Each distinct prompt prefilled once, its cache copied to the rows sampling from it."""
        ids, mask, rows = distinct_prompts(prompts, self.tokenizer.pad_token_id, self.device)  # (U, L), (B,)
        cache, logits = self.lean.prefill(ids, mask, room=params.max_new_tokens, rows=rows)
        live = torch.arange(len(prompts), device=self.device)  # batch row of each cache row

        def step(tok: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
            nonlocal live
            if int(done[live].sum()) * 8 >= len(live):  # drop finished rows from the cache
                keep = (~done[live]).nonzero().squeeze(-1)
                cache.select(keep)
                live = live[keep]
            out = logits.new_zeros(logits.shape)  # finished rows: any logits, their tokens are pad
            out[live] = self.lean.decode(tok[live], cache)
            return out

        return self._sample_loop(logits, step, len(prompts), params)

    def _sample_hf(self, prompts: list[list[int]], params: SamplingParams):
        ids, mask = left_pad(prompts, self.tokenizer.pad_token_id, self.device)  # (B, L), (B, L)
        positions = left_positions(mask)  # (B, L)
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True)
        state = {"mask": mask, "next_pos": positions[:, -1] + 1}

        def step(tok: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
            state["mask"] = torch.cat([state["mask"], torch.ones_like(state["mask"][:, :1])], 1)
            logits = self.model(input_ids=tok[:, None], attention_mask=state["mask"],
                                position_ids=state["next_pos"][:, None], past_key_values=cache,
                                use_cache=True).logits[:, -1, :]
            state["next_pos"] = state["next_pos"] + 1
            return logits

        return self._sample_loop(out.logits[:, -1, :], step, ids.shape[0], params)

    def _sample_loop(self, logits: torch.Tensor, step, batch: int, params: SamplingParams):
        """Sample up to ``max_new_tokens`` per row from next-token logits (B, V); ``step(tokens,
        done)`` feeds the sampled tokens (B,) and returns the next logits (those of finished rows
        are not used). Returns tokens, logprobs, lengths and finished flags."""
        pad_id = self.tokenizer.pad_token_id
        stop = torch.tensor([] if params.ignore_eos else sorted({self.tokenizer.eos_token_id, *params.stop_token_ids}),
                            dtype=torch.long, device=self.device)
        tokens = torch.full((batch, params.max_new_tokens), pad_id, dtype=torch.long,
                            device=self.device)  # (B, N)
        logps = torch.zeros((batch, params.max_new_tokens), device=self.device)  # (B, N)
        done = torch.zeros(batch, dtype=torch.bool, device=self.device)
        lengths = torch.zeros(batch, dtype=torch.long, device=self.device)
        for t in range(params.max_new_tokens):
            tok, lp = sample_tokens(logits, params, self.generator)  # (B,), (B,)
            tok = tok.masked_fill(done, pad_id)
            tokens[:, t] = tok
            logps[:, t] = lp.masked_fill(done, 0.0)
            lengths += (~done).long()
            done = done | torch.isin(tok, stop)
            if t == params.max_new_tokens - 1 or bool(done.all()):
                break
            logits = step(tok, done)
        return tokens.cpu(), logps.cpu(), lengths.cpu(), done.cpu()

    def _to_generations(self, tokens, logps, lengths, done) -> list[Generation]:
        rows = [ids[:n] for ids, n in zip(tokens.tolist(), lengths.tolist())]
        texts = self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        return [Generation(token_ids=ids, logprobs=lp[:len(ids)], text=text, finished=fin)
                for ids, lp, text, fin in zip(rows, logps.tolist(), texts, done.tolist())]
