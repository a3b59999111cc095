"""Optimizer backends: plain torch AdamW, or DeepSpeed ZeRO-2/3 behind ``optimizer.zero_stage``.

Both expose ``backward(loss)``, ``step() -> grad_norm``, ``state_dict()``/``load_state_dict()``.
"""
from __future__ import annotations

import math

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

    def __init__(self, model: torch.nn.Module, cfg: OptimizerConfig, lr: float | None = None,
                 total_steps: int = 0):
        self.model = model
        self.cfg = cfg
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=lr or cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                           eps=cfg.eps, weight_decay=cfg.weight_decay,
                                           fused=True)  # one kernel over all tensors
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.lr_schedule, total_steps))

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

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


class DeepSpeedBackend:
    """DeepSpeed ZeRO stage 2 or 3 on CUDA (the engine owns optimizer, clipping and warm-up)."""

    def __init__(self, model: torch.nn.Module, cfg: OptimizerConfig, lr: float | None = None,
                 total_steps: int = 0):
        import deepspeed

        ds_config = {
            "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": cfg.max_grad_norm,
            "zero_optimization": {"stage": cfg.zero_stage},
            "bf16": {"enabled": next(model.parameters()).dtype == torch.bfloat16},
            "optimizer": {"type": "AdamW", "params": {
                "lr": lr or cfg.lr, "betas": [cfg.beta1, cfg.beta2], "eps": cfg.eps,
                "weight_decay": cfg.weight_decay, "torch_adam": True}},
        }
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=ds_config)
        self.model = self.engine.module

    def backward(self, loss: torch.Tensor) -> None:
        # Losses are already divided by the batch normaliser: undo DeepSpeed's own scaling. On N
        # ranks each rank's loss is its share of one sum (trainer/parallel.py), while DeepSpeed
        # averages the ranks' gradients: scaling by N makes that mean the sum.
        dist = torch.distributed
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self.engine.backward(loss * world if world > 1 else loss, scale_wrt_gas=False)

    def step(self) -> float:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def make_backend(model: torch.nn.Module, cfg: OptimizerConfig, lr: float | None = None,
                 total_steps: int = 0):
    """Plain torch for ``zero_stage: 0``; DeepSpeed otherwise (refused without deepspeed or CUDA)."""
    if cfg.zero_stage == 0:
        return TorchBackend(model, cfg, lr, total_steps)
    problems = []
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        problems.append(("optimizer.zero_stage", "needs the deepspeed package, which is not installed"))
    if not torch.cuda.is_available():
        problems.append(("optimizer.zero_stage", "needs CUDA, which is not available"))
    if problems:
        raise ConfigError(problems)
    return DeepSpeedBackend(model, cfg, lr, total_steps)
