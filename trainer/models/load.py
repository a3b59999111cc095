"""Load any Hugging Face causal LM and tokenizer from a local directory (or a reachable hub id)."""
from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.config import ModelConfig, TokenizerConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_tokenizer(model_cfg: ModelConfig, tok_cfg: TokenizerConfig):
    """The tokenizer, with a pad token (eos when it has none) and left padding for generation."""
    tok = AutoTokenizer.from_pretrained(tok_cfg.path or model_cfg.path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_model(path: str, model_cfg: ModelConfig, device: torch.device, *, trainable: bool = True):
    """A causal LM on ``device`` in the configured dtype; frozen unless trainable.

    Dropout stays off (eval mode) in training too, as in verl and OpenRLHF: the trainer must score
    a token exactly as the sampler did. Only gradient checkpointing, which Hugging Face applies
    in train mode alone, puts the model in train mode (its dropout is then the model's own).
    """
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[model_cfg.dtype]).to(device)
    if trainable:
        if model_cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.train()
        else:
            model.eval()
    else:
        model.requires_grad_(False)
        model.eval()
    return model
