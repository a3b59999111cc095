"""Optimizer backends: plain torch AdamW, or DeepSpeed (ZeRO stage 0-3) behind ``optimizer.backend``
and ``optimizer.zero_stage``, on CUDA or on the CPU.

Both expose ``backward(loss)`` (one micro-batch), ``step() -> grad_norm`` (the optimizer step),
``lr()``, ``gathered()`` (whole parameters), ``pads`` (whether every backward is a collective),
and the checkpoint's ``state_dict()``/``load_state_dict()``.
"""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import torch

from trainer.config import ConfigError, OptimizerConfig


def lr_factor(step: int, warmup: int, schedule: str, total: int) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based).

    >>> [round(lr_factor(s, 0, "linear", 4), 2) for s in range(5)]
    [1.0, 0.75, 0.5, 0.25, 0.0]
    >>> lr_factor(0, 2, "constant", 0), lr_factor(5, 2, "constant", 0)
    (0.5, 1.0)
    """
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class TorchBackend:
    """AdamW, linear warm-up, global-norm clipping."""

    pads = False
    """One reduction per optimizer step (trainer/parallel.py), none in a backward."""
    collective_forward = False
    """A forward is local to the rank."""

    def __init__(self, model: torch.nn.Module, cfg: OptimizerConfig, lr: float | None = None,
                 total_steps: int = 0):
        self.model = model
        self.cfg = cfg
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=lr or cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                           eps=cfg.eps, weight_decay=cfg.weight_decay,
                                           fused=True)  # one kernel over all tensors
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule(cfg, total_steps))

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        """Clip, step, zero; returns the gradient norm before clipping."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        limit = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(params, limit, foreach=True)) if params else 0.0
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def lr(self) -> float:
        """The rate the next optimizer step uses."""
        return float(self.optimizer.param_groups[0]["lr"])

    def gathered(self):
        """Every parameter is whole here already."""
        return contextlib.nullcontext()

    def weights(self):
        """What a rollout engine's weight sync reads: the module itself."""
        return self.model

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def schedule(cfg: OptimizerConfig, total_steps: int):
    """The learning-rate multiplier by optimizer step that both backends use (one source of the
    schedule: DeepSpeed is handed this, not its own WarmupLR/WarmupDecayLR, whose curves differ)."""
    return lambda s: lr_factor(s, cfg.warmup_steps, cfg.lr_schedule, total_steps)


class DeepSpeedBackend:
    """DeepSpeed, ZeRO stage 0-3, on NCCL ranks (CUDA) or gloo ranks (CPU, ``DS_ACCELERATOR=cpu``).

    The engine owns the optimizer (AdamW, ``torch_adam``), clipping and the schedule (this
    module's :func:`schedule`, so the rate at every step is the plain backend's). Gradient
    accumulation is the caller's (``managed_gradient_accumulation: false``): each micro-batch is a
    :meth:`backward` and :meth:`step` is the boundary, where stages 0 and 1 reduce. Stages 2 and 3
    reduce inside every backward, so every rank must run the same number of backwards:
    ``pads`` tells the job to give a rank short of micro-batches zero-weight ones.
    """

    pads = True
    """Every backward is a collective here (stages 2, 3): ranks must do equal counts of them."""

    def __init__(self, model: torch.nn.Module, cfg: OptimizerConfig, lr: float | None = None,
                 total_steps: int = 0):
        ensure_process_group()
        import deepspeed

        self.stage = cfg.zero_stage
        self.collective_forward = cfg.zero_stage == 3
        """Every forward gathers parameters from every rank: ranks run the same forwards."""
        ds_config = {
            "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
            "gradient_accumulation_steps": 1,
            "managed_gradient_accumulation": False,
            "gradient_clipping": cfg.max_grad_norm,
            "zero_optimization": {"stage": cfg.zero_stage},
            "bf16": {"enabled": next(model.parameters()).dtype == torch.bfloat16},
            "optimizer": {"type": "AdamW", "params": {
                "lr": lr or cfg.lr, "betas": [cfg.beta1, cfg.beta2], "eps": cfg.eps,
                "weight_decay": cfg.weight_decay, "torch_adam": True}},
            "steps_per_print": 2**31 - 1,
            "wall_clock_breakdown": False,
        }
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=ds_config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule(cfg, total_steps)))
        self.model = self.engine.module

    def backward(self, loss: torch.Tensor) -> None:
        # Losses are already divided by the batch normaliser: undo DeepSpeed's own scaling. On N
        # ranks each rank's loss is its share of one sum (trainer/parallel.py), while DeepSpeed
        # averages the ranks' gradients: scaling by N makes that mean the sum.
        world = torch.distributed.get_world_size()
        self.engine.backward(loss * world if world > 1 else loss, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def lr(self) -> float:
        """The rate the next optimizer step uses."""
        return float(self.engine.get_lr()[0])

    def gathered(self):
        """A context in which every parameter is whole on every rank (ZeRO-3 partitions them;
        entering is a collective: every rank enters it together). Nothing else changes."""
        if self.stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=None)

    def weights(self):
        """What a rollout engine's weight sync reads: the module, or under ZeRO-3 a view that
        gathers the whole parameters (every rank syncs at once, as every rank updates at once)."""
        return _GatheredWeights(self) if self.stage == 3 else self.model

    # -- checkpoints: every rank writes and reads its own shard (a collective) ------------------
    def state_dict(self) -> dict:
        """What the checkpoint's optimizer.pt holds: where the shards are, not the state (each
        rank's shard of the optimizer is in the checkpoint's ``zero/``, :meth:`save_shards`)."""
        return {"deepspeed": {"stage": self.stage, "world": torch.distributed.get_world_size()}}

    def load_state_dict(self, state: dict) -> None:
        raise RuntimeError("a DeepSpeed optimizer is loaded from its shards (load_shards), not a state dict")

    def save_shards(self, directory: Path) -> None:
        """Every rank writes its optimizer (and, under ZeRO-3, parameter) shard, the schedule and
        the engine's counters to ``directory``."""
        self.engine.save_checkpoint(str(directory), tag=SHARD_TAG, client_state={}, save_latest=False)

    def load_shards(self, directory: Path, saved: dict) -> None:
        """Every rank reads back its shard. A ZeRO checkpoint is split over the ranks it was taken
        on: another number of ranks, or another stage, is refused naming both."""
        want = saved.get("deepspeed") or {}
        world = torch.distributed.get_world_size()
        if want.get("stage") != self.stage or want.get("world") != world:
            raise ConfigError([("parallel.ranks", f"this checkpoint holds a ZeRO-{want.get('stage')} optimizer split "
                                                  f"over {want.get('world')} ranks; it resumes on {want.get('world')} "
                                                  f"ranks with optimizer.zero_stage {want.get('stage')}, not on "
                                                  f"{world} with stage {self.stage}")])
        path, _ = self.engine.load_checkpoint(str(directory), tag=SHARD_TAG, load_module_strict=True,
                                              load_optimizer_states=True, load_lr_scheduler_states=True)
        if path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint shards in {directory}")


class _GatheredWeights:
    """The policy's parameters, gathered whole and copied, for a weight sync under ZeRO-3."""

    def __init__(self, backend: DeepSpeedBackend):
        self.backend = backend

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        with self.backend.gathered():
            return [(n, p.detach().clone()) for n, p in self.backend.model.named_parameters()]

    def parameters(self) -> list[torch.Tensor]:
        return [p for _, p in self.named_parameters()]


SHARD_TAG = "shards"
"""The tag DeepSpeed's own checkpoint takes inside a Temper checkpoint's ``zero/`` folder."""


def ensure_process_group() -> None:
    """DeepSpeed needs a process group: outside one (a job in one process), a group of one rank
    over gloo, in this process; and ``LOCAL_RANK``."""
    dist = torch.distributed
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    # DeepSpeed insists on its launcher's variable; torchrun sets it, a group made otherwise (a
    # test's, one process's) runs its ranks on one host, where the local rank is the rank.
    os.environ.setdefault("LOCAL_RANK", str(dist.get_rank()))


def uses_deepspeed(cfg: OptimizerConfig) -> bool:
    """Whether the update runs through DeepSpeed (``optimizer.backend``; ``auto``: when ZeRO is on)."""
    return cfg.backend == "deepspeed" or (cfg.backend == "auto" and cfg.zero_stage > 0)


def deepspeed_problem() -> str | None:
    """Why DeepSpeed cannot run in this process, or None. Without CUDA it runs on the CPU
    (``DS_ACCELERATOR=cpu``, gloo ranks), which Temper sets before DeepSpeed is imported."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        return ("needs the deepspeed package, which is not installed "
                "(DS_BUILD_OPS=0 pip install --no-build-isolation -r requirements/deepspeed.txt)")
    return None


def make_backend(model: torch.nn.Module, cfg: OptimizerConfig, lr: float | None = None,
                 total_steps: int = 0):
    """Plain torch, or DeepSpeed (:func:`uses_deepspeed`; refused without the deepspeed package)."""
    if not uses_deepspeed(cfg):
        return TorchBackend(model, cfg, lr, total_steps)
    problem = deepspeed_problem()
    if problem:
        raise ConfigError([("optimizer.backend" if cfg.backend == "deepspeed" else "optimizer.zero_stage", problem)])
    return DeepSpeedBackend(model, cfg, lr, total_steps)
