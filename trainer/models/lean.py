"""A lean forward pass for Llama-family models, computed over the Hugging Face model's own weights.

A small model spends most of a Hugging Face forward in Python: module calls, hooks, mask
building, cache bookkeeping. ``LeanLlama`` computes the same function in a few tensor ops per
layer (fused q/k/v and gate/up projections, ``F.rms_norm``, one ``scaled_dot_product_attention``)
and a preallocated KV cache, reading the parameters of the wrapped model, so gradients land on
them and optimizer steps are seen at once. It serves three calls:

    lean = LeanLlama.wrap(model)            # None when the model is not one it computes exactly
    logits = lean.logits(input_ids)         # (B, T, V): a right-padded batch (training, scoring)
    cache, last = lean.prefill(ids, mask, room=N, rows=rows)   # left-padded prompts, shared
    last = lean.decode(tokens, cache)       # (B, V): one new token per sequence

``prefill`` computes each distinct prompt once and copies its keys and values to every row that
samples from it (``rows``), as vLLM shares a prompt's KV blocks between the ``n`` samples of a
request. ``tests/trainer/test_lean.py`` checks that every path equals the Hugging Face forward.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

ARCHITECTURES = {"llama", "mistral", "qwen2"}
"""Model types whose decoder layer is exactly: RMSNorm, attention with rotary positions, RMSNorm,
SiLU-gated MLP (qwen2 adds q/k/v biases, which the lean path applies)."""
STATIC_ROPE = {"default", "linear", "llama3", "yarn"}
"""Rotary types whose frequencies do not depend on the sequence length."""
LAYER_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
ATTENTION_PARTS = {"q_proj", "k_proj", "v_proj", "o_proj"}
MLP_PARTS = {"gate_proj", "up_proj", "down_proj", "act_fn"}


def distinct_prompts(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each distinct prompt once, left-padded: ids (U, L) and mask (U, L); and the index of each
    input prompt among them (B,)."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompts]
    ids, mask = left_pad([list(p) for p in index], pad_id, device)
    return ids, mask, torch.tensor(rows, dtype=torch.long, device=device)


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (B, L) left-padded with ``pad_id`` and the attention mask (B, L)."""
    length = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (length - len(p)) + list(p) for p in prompts], dtype=torch.long)
    mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
    return ids.to(device), mask.to(device)


def left_positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids (U, L) of left-padded rows: 0 at each row's first real token."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def prompt_attention(valid: torch.Tensor) -> torch.Tensor:
    """(U, 1, L, L) bool for left-padded prompts (``valid`` (U, L)): a token sees earlier real
    tokens; a padding token sees itself, so that no row of the softmax is empty."""
    length = valid.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=valid.device).tril()
    return ((causal & valid[:, None, :]) | torch.eye(length, dtype=torch.bool, device=valid.device))[:, None]


def unsupported(model) -> str | None:
    """Why the lean forward cannot compute ``model`` exactly, or None when it can."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        return f"{type(model).__name__} is not a Hugging Face model"
    config = model.config
    if config.model_type not in ARCHITECTURES:
        return f"model type {config.model_type!r} is not one of {sorted(ARCHITECTURES)}"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(model, "lm_head"):
        return "no model.layers / lm_head"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} is not silu"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "sliding-window attention"
    rope = getattr(inner.rotary_emb, "rope_type", "default")
    if rope not in STATIC_ROPE:
        return f"rotary type {rope!r} depends on the sequence length"
    if getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing is on"
    for i, layer in enumerate(inner.layers):
        parts = {name for name, _ in layer.named_children()}
        attn = {name for name, _ in layer.self_attn.named_children()}
        mlp = {name for name, _ in layer.mlp.named_children()}
        if parts != LAYER_PARTS or attn != ATTENTION_PARTS or not mlp <= MLP_PARTS:
            return f"layer {i} has parts {sorted(parts | attn | mlp)}"
    return None


PACKED_MAX_WIDTH = 512
"""Longest packed row (a prompt and all its responses) scored as one sequence; beyond it the
attention over the whole row (masked between responses) would cost more than it saves."""


@dataclass
class PackedGroups:
    """Each distinct prompt and the responses that continue it laid out in one row, without
    padding between them: ``[prompt (left-padded to L) | response | response | ...]``, rows
    right-padded to the longest."""

    width: int
    """T: the longest row."""
    positions: torch.Tensor
    """(U, T) position ids: the prompt's, then each response continuing from the prompt's end."""
    attention: torch.Tensor
    """(U, 1, T, T) bool: a token sees the prompt's real tokens and the earlier tokens of its own
    response (a padding token sees only itself)."""
    response_slots: torch.Tensor
    """(B, R) flat index in (U*T) of each response token (padding of a response points at a
    row's padding)."""
    predictors: torch.Tensor
    """(B, R) flat index of the token whose output predicts each response token: the prompt's
    last token for the first, the previous response token after that."""


def pack_groups(prompt_mask: torch.Tensor, rows: torch.Tensor, response_mask: torch.Tensor) -> PackedGroups:
    """The packed layout for prompts (U, L), the prompt index of each response (B,) and the
    responses' real tokens (B, R), right-padded."""
    device = prompt_mask.device
    count, length = prompt_mask.shape
    span = response_mask.shape[1]
    owner = rows.tolist()
    sizes = response_mask.long().sum(-1).tolist()
    cursor = [length] * count
    starts = []
    for u, size in zip(owner, sizes):
        starts.append(cursor[u])
        cursor[u] += size
    width = max(cursor) + 1  # one padding column at least: where response padding goes
    prompt_len = prompt_mask.long().sum(-1).tolist()
    segment = [[0] * length + [-1] * (width - length) for _ in range(count)]  # 0 prompt, -1 padding
    positions = [[0] * width for _ in range(count)]
    slots, predictors = [], []
    for b, (u, size, start) in enumerate(zip(owner, sizes, starts)):
        base = u * width
        cols = list(range(start, start + size))
        slots.append([base + c for c in cols] + [base + width - 1] * (span - size))
        predictors.append([base + length - 1] + [base + c for c in cols[:-1]]
                          + [base + width - 1] * (span - max(size, 1)))
        for j, c in enumerate(cols):
            segment[u][c] = b + 1
            positions[u][c] = prompt_len[u] + j
    segment_t = torch.tensor(segment, device=device)  # (U, T)
    positions_t = torch.tensor(positions, device=device)
    positions_t[:, :length] = left_positions(prompt_mask)
    valid = segment_t >= 0
    valid[:, :length] = prompt_mask.bool()
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()  # (T, T)
    same = (segment_t[:, None, :] == 0) | (segment_t[:, None, :] == segment_t[:, :, None])  # (U, T, T)
    attention = (causal & same & valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=device)
    return PackedGroups(width=width, positions=positions_t, attention=attention[:, None],
                        response_slots=torch.tensor(slots, device=device),
                        predictors=torch.tensor(predictors, device=device))


@dataclass
class KVCache:
    """Keys and values of every layer in preallocated slots, one row per sequence."""

    keys: list[torch.Tensor]
    """Per layer: (B, Hkv, S, D), S slots of which the first ``length`` are filled."""
    values: list[torch.Tensor]
    """Per layer: (B, Hkv, S, D)."""
    valid: torch.Tensor
    """(B, S) bool: slots holding a real token (left padding is not)."""
    positions: torch.Tensor
    """(B,) the position id the next token of each row takes."""
    length: int
    """Slots filled so far (the same for every row)."""

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (finished sequences leave the batch)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.valid = self.valid.index_select(0, rows)
        self.positions = self.positions.index_select(0, rows)


class LeanLlama:
    """The forward of a Llama-family ``*ForCausalLM`` in plain tensor ops, over its parameters."""

    def __init__(self, model):
        self.model = model
        config = model.config
        self.inner = model.model
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        attn = self.inner.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.eps = self.inner.norm.variance_epsilon
        self.rope_scale = float(getattr(self.inner.rotary_emb, "attention_scaling", 1.0))
        self._rope_table: tuple[torch.Tensor, torch.Tensor] | None = None
        """cos, sin (P, D) of positions 0..P-1, for sampling (see :meth:`_rotary_at`)."""

    @classmethod
    def wrap(cls, model) -> "LeanLlama | None":
        """A lean forward over ``model``'s weights, or None where it would not be exact."""
        return None if unsupported(model) else cls(model)

    # -- pieces ----------------------------------------------------------------------------
    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype) * weight

    def _rotary(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (B, 1, T, D) for position ids (B, T)."""
        inv_freq = self.inner.rotary_emb.inv_freq
        freqs = positions[..., None].float() * inv_freq.to(positions.device)  # (B, T, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D)
        cos = (emb.cos() * self.rope_scale).to(dtype)
        sin = (emb.sin() * self.rope_scale).to(dtype)
        return cos[:, None], sin[:, None]

    def _rotary_at(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (B, 1, 1, D) for one position per row (B,), looked up in a table of every
        position so far: the same numbers :meth:`_rotary` computes, without its ten operations
        a token (sampling only; the table grows by doubling)."""
        need = int(positions.max()) + 1
        table = self._rope_table
        if table is None or table[0].shape[0] < need or table[0].dtype != dtype or table[0].device != positions.device:
            size = max(need, 2 * (table[0].shape[0] if table is not None else 0), 64)
            cos, sin = self._rotary(torch.arange(size, device=positions.device)[None], dtype)  # (1, 1, P, D)
            table = self._rope_table = (cos[0, 0], sin[0, 0])
        return (table[0].index_select(0, positions)[:, None, None],
                table[1].index_select(0, positions)[:, None, None])

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _qkv(self, layer, x: torch.Tensor, cos, sin):
        """Rotated queries (B, H, T, D), keys and values (B, Hkv, T, D) of normed input x (B, T, C)."""
        a = layer.self_attn
        weight = torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight))  # (Q+2K, C)
        bias = None
        if a.q_proj.bias is not None:
            bias = torch.cat((a.q_proj.bias, a.k_proj.bias, a.v_proj.bias))
        batch, length = x.shape[:2]
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = F.linear(x, weight, bias).split((q_size, kv_size, kv_size), dim=-1)
        q = q.view(batch, length, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = k.view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin), v

    def _attend(self, q, k, v, *, causal: bool, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attention output (B, T, H*D); ``mask`` (B, 1, T, S) marks the keys each query sees."""
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                             scale=self.scaling,
                                             enable_gqa=self.kv_heads != self.heads)  # (B, H, T, D)
        return out.transpose(1, 2).flatten(2)  # (B, T, H*D)

    def _mlp(self, layer, x: torch.Tensor) -> torch.Tensor:
        m = layer.mlp
        gate_up = F.linear(x, torch.cat((m.gate_proj.weight, m.up_proj.weight)),
                           None if m.gate_proj.bias is None else torch.cat((m.gate_proj.bias, m.up_proj.bias)))
        gate, up = gate_up.chunk(2, dim=-1)  # (B, T, I) each
        return F.linear(F.silu(gate) * up, m.down_proj.weight, m.down_proj.bias)

    @staticmethod
    def _out(layer, x: torch.Tensor) -> torch.Tensor:
        o = layer.self_attn.o_proj
        return F.linear(x, o.weight, o.bias)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        head = self.model.lm_head
        return F.linear(self._norm(h, self.inner.norm.weight), head.weight, head.bias)

    # -- whole sequences -------------------------------------------------------------------
    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of right-padded ids (B, T), positions 0..T-1.

        Padding sits after every real token, so causal attention alone keeps it out of the real
        positions (whose logits are the ones the caller reads).
        """
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]  # (1, T)
        h = self.inner.embed_tokens(input_ids)  # (B, T, C)
        cos, sin = self._rotary(positions, h.dtype)
        for layer in self.inner.layers:
            q, k, v = self._qkv(layer, self._norm(h, layer.input_layernorm.weight), cos, sin)
            h = h + self._out(layer, self._attend(q, k, v, causal=True))
            h = h + self._mlp(layer, self._norm(h, layer.post_attention_layernorm.weight))
        return self._head(h)

    def response_logits(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, rows: torch.Tensor,
                        responses: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """Logits (B, R, V) of each response token given its prompt and the tokens before it.

        ``prompts`` (U, L) are the distinct prompts, left-padded (``prompt_mask`` (U, L)); row b
        of ``responses`` (B, R) continues prompt ``rows[b]``; ``response_mask`` (B, R) is 1 on
        its real tokens (model or environment), right-padded. Each prompt is computed once for
        all the responses that share it (a GRPO group shares one) and the gradient of every
        response flows back into it. Row b, position j holds the distribution response token j
        was drawn from.
        """
        per_prompt = torch.zeros(prompts.shape[0], dtype=torch.long, device=prompts.device)
        per_prompt.index_add_(0, rows, response_mask.long().sum(-1))  # (U,) response tokens
        if prompts.shape[1] + int(per_prompt.max()) + 1 > PACKED_MAX_WIDTH:
            return self._two_stream(prompts, prompt_mask, rows, responses)
        packed = pack_groups(prompt_mask, rows, response_mask)
        ids = prompts.new_zeros((prompts.shape[0], packed.width))  # (U, T)
        ids[:, :prompts.shape[1]] = prompts
        real = response_mask.bool()
        ids.view(-1)[packed.response_slots[real]] = responses[real]
        h = self.inner.embed_tokens(ids)  # (U, T, C)
        cos, sin = self._rotary(packed.positions, h.dtype)
        for layer in self.inner.layers:
            q, k, v = self._qkv(layer, self._norm(h, layer.input_layernorm.weight), cos, sin)
            h = h + self._out(layer, self._attend(q, k, v, causal=False, mask=packed.attention))
            h = h + self._mlp(layer, self._norm(h, layer.post_attention_layernorm.weight))
        before = h.flatten(0, 1).index_select(0, packed.predictors.view(-1))  # (B*R, C)
        return self._head(before).view(*responses.shape, -1)  # (B, R, V)

    def _two_stream(self, prompts, prompt_mask, rows, responses) -> torch.Tensor:
        """``response_logits`` for long responses: prompts (U, L) and responses (B, R) as two
        batches, the responses' queries attending to their prompt's keys and values."""
        device = prompts.device
        span = responses.shape[1]
        valid = prompt_mask.bool()  # (U, L)
        prompt_pos = left_positions(prompt_mask)  # (U, L)
        lengths = prompt_mask.long().sum(-1)  # (U,)
        response_pos = lengths.index_select(0, rows)[:, None] + torch.arange(span, device=device)  # (B, R)
        prompt_attn = prompt_attention(valid)  # (U, 1, L, L)
        response_attn = torch.cat((  # (B, 1, R, L+R): the prompt's real tokens, then causal
            valid.index_select(0, rows)[:, None, None, :].expand(-1, 1, span, -1),
            torch.ones(span, span, dtype=torch.bool, device=device).tril()[None, None].expand(len(rows), 1, -1, -1)),
            dim=-1)
        hp = self.inner.embed_tokens(prompts)  # (U, L, C)
        hr = self.inner.embed_tokens(responses)  # (B, R, C)
        cos_p, sin_p = self._rotary(prompt_pos, hp.dtype)
        cos_r, sin_r = self._rotary(response_pos, hr.dtype)
        for layer in self.inner.layers:
            qp, kp, vp = self._qkv(layer, self._norm(hp, layer.input_layernorm.weight), cos_p, sin_p)
            qr, kr, vr = self._qkv(layer, self._norm(hr, layer.input_layernorm.weight), cos_r, sin_r)
            keys = torch.cat((kp.index_select(0, rows), kr), dim=2)  # (B, Hkv, L+R, D)
            values = torch.cat((vp.index_select(0, rows), vr), dim=2)  # (B, Hkv, L+R, D)
            hp = hp + self._out(layer, self._attend(qp, kp, vp, causal=False, mask=prompt_attn))
            hp = hp + self._mlp(layer, self._norm(hp, layer.post_attention_layernorm.weight))
            hr = hr + self._out(layer, self._attend(qr, keys, values, causal=False, mask=response_attn))
            hr = hr + self._mlp(layer, self._norm(hr, layer.post_attention_layernorm.weight))
        before = torch.cat((hp[:, -1].index_select(0, rows)[:, None], hr[:, :-1]), dim=1)  # (B, R, C)
        return self._head(before)

    # -- sampling with a cache -------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, room: int,
                rows: torch.Tensor | None = None) -> tuple[KVCache, torch.Tensor]:
        """Run left-padded prompts (U, L) once; returns a cache with ``room`` free slots and the
        last position's logits, both expanded to the sampled rows (``rows``: (B,) prompt index
        of each row; default one row per prompt)."""
        valid = attention_mask.bool()  # (U, L)
        positions = left_positions(attention_mask)  # (U, L)
        count, length = input_ids.shape
        mask = prompt_attention(valid)  # (U, 1, L, L)
        h = self.inner.embed_tokens(input_ids)  # (U, L, C)
        cos, sin = self._rotary(positions, h.dtype)
        keys, values = [], []
        for layer in self.inner.layers:
            q, k, v = self._qkv(layer, self._norm(h, layer.input_layernorm.weight), cos, sin)
            h = h + self._out(layer, self._attend(q, k, v, causal=False, mask=mask))
            h = h + self._mlp(layer, self._norm(h, layer.post_attention_layernorm.weight))
            keys.append(k)
            values.append(v)
        last = self._head(h[:, -1])  # (U, V)
        if rows is None:
            rows = torch.arange(count, device=input_ids.device)
        slots = length + room

        def expand(x: torch.Tensor) -> torch.Tensor:  # (U, Hkv, L, D) -> (B, Hkv, S, D)
            out = x.new_zeros((len(rows), x.shape[1], slots, x.shape[3]))
            out[:, :, :length] = x.index_select(0, rows)
            return out

        grown = torch.zeros((len(rows), slots), dtype=torch.bool, device=valid.device)
        grown[:, :length] = valid.index_select(0, rows)
        cache = KVCache(keys=[expand(k) for k in keys], values=[expand(v) for v in values],
                        valid=grown, positions=positions[:, -1].index_select(0, rows) + 1,
                        length=length)
        return cache, last.index_select(0, rows)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Feed one token per row (B,); returns the next logits (B, V) and advances the cache."""
        slot = cache.length
        cache.valid[:, slot] = True
        mask = cache.valid[:, None, None, :slot + 1]  # (B, 1, 1, slot+1)
        h = self.inner.embed_tokens(tokens[:, None])  # (B, 1, C)
        cos, sin = self._rotary_at(cache.positions, h.dtype)  # (B, 1, 1, D)
        for i, layer in enumerate(self.inner.layers):
            q, k, v = self._qkv(layer, self._norm(h, layer.input_layernorm.weight), cos, sin)
            cache.keys[i][:, :, slot] = k[:, :, 0]
            cache.values[i][:, :, slot] = v[:, :, 0]
            out = self._attend(q, cache.keys[i][:, :, :slot + 1], cache.values[i][:, :, :slot + 1],
                               causal=False, mask=mask)
            h = h + self._out(layer, out)
            h = h + self._mlp(layer, self._norm(h, layer.post_attention_layernorm.weight))
        cache.length += 1
        cache.positions = cache.positions + 1
        return self._head(h[:, -1])
