"""Fixtures for the trainer tests: the tiny model built once per session."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory) -> str:
    """A freshly built tiny Llama + char tokenizer, loaded by tests through from_pretrained."""
    import torch

    torch.set_num_threads(1)
    from trainer.models.tiny import build_tiny

    return str(build_tiny(tmp_path_factory.mktemp("tiny") / "model", layers=2))


@pytest.fixture
def base_config(tiny_path) -> dict:
    """A small, fast job config on single-digit addition."""
    return {"model": {"path": tiny_path}, "seed": 0,
            "rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 3},
            "optimizer": {"lr": 1e-3, "micro_batch_size": 8},
            "limits": {"max_steps": 3}}
