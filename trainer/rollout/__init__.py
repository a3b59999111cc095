"""Rollout engines: prompts (token ids) in, completions with token ids and logprobs out."""
from trainer.rollout.base import Generation, RolloutEngine, SamplingParams

__all__ = ["Generation", "RolloutEngine", "SamplingParams", "make_engine"]


def make_engine(kind: str, model, tokenizer, **kwargs) -> RolloutEngine:
    """The engine named by ``rollout.engine`` (``torch`` or ``vllm``)."""
    if kind == "torch":
        from trainer.rollout.torch_engine import TorchEngine

        return TorchEngine(model, tokenizer, **kwargs)
    if kind == "vllm":
        from trainer.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model, tokenizer, **kwargs)
    raise ValueError(f"rollout.engine: unknown engine {kind!r}")
