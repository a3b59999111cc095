"""Rollout engines: prompts (token ids) in, completions with token ids and logprobs out."""
from trainer.rollout.base import Generation, RolloutEngine, SamplingParams

__all__ = ["Generation", "RolloutEngine", "SamplingParams", "make_engine"]


def make_engine(kind: str, model, tokenizer, **kwargs) -> RolloutEngine:
    """The engine named by ``rollout.engine`` (``torch`` or ``vllm``)."""
    if kind == "torch":
        # lazy: an engine module imports torch (seconds), and this package must stay cheap to
        # import (trainer.evaluation, and through it every worker, imports it at start).
        from trainer.rollout.torch_engine import TorchEngine

        return TorchEngine(model, tokenizer, **kwargs)
    if kind == "vllm":
        from trainer.rollout.vllm_engine import VLLMEngine  # lazy: torch, as TorchEngine above

        return VLLMEngine(model, tokenizer, **kwargs)
    raise ValueError(f"rollout.engine: unknown engine {kind!r}")
