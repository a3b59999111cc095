"""A tiny Llama-architecture model and a character-level tokenizer, built locally.

No model hub is reachable here, so tests, the demo and the benches build this model (random init),
save it with ``save_pretrained`` and load it back through ``from_pretrained`` like any other model.

    python -m trainer.models.tiny var/tiny     # writes config, weights and tokenizer
"""
from __future__ import annotations

import string
import sys
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = string.digits + string.ascii_lowercase + string.ascii_uppercase + " +-*/=()[]<>?!.,:;'\"_|#\n"


def char_tokenizer(chars: str = CHARS) -> PreTrainedTokenizerFast:
    """One token per character; ``<bos>`` is prepended to every encoded text."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>", padding_side="left")


def tiny_llama_config(vocab_size: int, *, hidden: int = 64, layers: int = 4, heads: int = 2,
                      intermediate: int = 256, max_positions: int = 256,
                      pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> LlamaConfig:
    """Llama config with head dimension ``hidden // heads`` (vLLM needs at least 32)."""
    if hidden // heads < 32:
        raise ValueError(f"head dimension {hidden // heads} < 32: vLLM refuses it")
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, head_dim=hidden // heads,
                       max_position_embeddings=max_positions, tie_word_embeddings=True,
                       pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id,
                       rms_norm_eps=1e-5, torch_dtype="float32")


def build_tiny(path: str | Path, *, hidden: int = 64, layers: int = 4, heads: int = 2,
               intermediate: int = 256, max_positions: int = 256, seed: int = 0) -> Path:
    """Build, randomly initialise and save the tiny model and its tokenizer under ``path``."""
    path = Path(path)
    tokenizer = char_tokenizer()
    config = tiny_llama_config(len(tokenizer), hidden=hidden, layers=layers, heads=heads,
                               intermediate=intermediate, max_positions=max_positions,
                               pad_id=tokenizer.pad_token_id, bos_id=tokenizer.bos_token_id,
                               eos_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    out = build_tiny(sys.argv[1] if len(sys.argv) > 1 else "var/tiny")
    print(out)
