"""A checkpoint is one directory: everything a job needs to continue exactly where it stopped.

    step-100/
      model/          weights and tokenizer (``save_pretrained``)
      optimizer.pt    {"backend": the RL optimizer, "sft_backend": the SFT optimizer or None}
      rng.pt          {"engine": engine RNG, "torch": torch RNG, "sft_rng": SFT task RNG,
                       "pending": batches generated ahead, [{"trajs", "policy_version"}]}
      state.json      {"step", "sft_steps_done", "initial_model_path", "config", "sampler"}

It is written next to its place (``step-100.tmp``) and renamed, so a crash never leaves half of
one; older ``step-*`` siblings in ``checkpoint.dir`` beyond ``checkpoint.keep_last`` are removed.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.config import CheckpointConfig, TrainerConfig, load_config
from trainer.pipeline import Batch


@dataclass
class Checkpoint:
    """A job's state, apart from the model and tokenizer (saved and loaded by the job)."""

    step: int
    """RL updates taken."""
    config: TrainerConfig
    """The run's config; on load, a KL reference defaults to the run's initial model."""
    sampler: dict
    """:meth:`TaskSampler.state_dict` (RNG, domain weights, pass-rate estimates, levels)."""
    optimizer: dict
    """The RL optimizer's state."""
    engine_rng: Any
    """The rollout engine's ``state_dict`` (its sampling RNG)."""
    torch_rng: torch.Tensor
    """``torch.get_rng_state()``."""
    ahead: list[Batch]
    """Batches generated ahead of the next step (overlap), verified, with their policy versions."""
    sft: dict
    """:meth:`SupervisedStage.state_dict` (steps done, task RNG, optimizer or None)."""

    def save(self, directory: str | os.PathLike, model, tokenizer) -> Path:
        """Write the checkpoint (and ``model``, ``tokenizer``) to ``directory``; prune old ones."""
        path = Path(directory)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        torch.save({"backend": self.optimizer, "sft_backend": self.sft["optimizer"]}, tmp / "optimizer.pt")
        torch.save({"engine": self.engine_rng, "torch": self.torch_rng,
                    "pending": [{"trajs": b.trajs, "policy_version": b.policy_version} for b in self.ahead],
                    "sft_rng": self.sft["rng"]}, tmp / "rng.pt")
        state = {"step": self.step, "sft_steps_done": self.sft["steps_done"],
                 "initial_model_path": self.config.model.path,
                 "config": self.config.to_dict(), "sampler": self.sampler}
        (tmp / "state.json").write_text(json.dumps(state, indent=1))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        prune(path.parent, self.config.checkpoint)
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Checkpoint":
        """The checkpoint in ``directory`` (its weights are in ``directory/model``)."""
        path = Path(directory)
        state = json.loads((path / "state.json").read_text())
        config = load_config(state["config"])
        if not config.model.reference_path and config.algorithm.kl_coef > 0:
            config.model.reference_path = state["initial_model_path"]
        opt = torch.load(path / "optimizer.pt", weights_only=False)
        rng = torch.load(path / "rng.pt", weights_only=False)
        ahead = []
        for i, saved in enumerate(rng["pending"]):
            if isinstance(saved, list):  # saved before batches kept their version: the i-th batch
                # ahead was queued i+1 steps before the checkpoint, behind that step's sync
                saved = {"trajs": saved, "policy_version": max(0, state["step"] - config.rollout.staleness + i)}
            ahead.append(Batch(saved["trajs"], saved["policy_version"]))
        return cls(step=state["step"], config=config, sampler=state["sampler"], optimizer=opt["backend"],
                   engine_rng=rng["engine"], torch_rng=rng["torch"], ahead=ahead,
                   sft={"steps_done": state["sft_steps_done"], "rng": rng["sft_rng"],
                        "optimizer": opt["sft_backend"]})


def prune(parent: Path, cfg: CheckpointConfig) -> None:
    """Keep the last ``keep_last`` ``step-*`` checkpoints when ``parent`` is ``checkpoint.dir``."""
    keep = cfg.keep_last
    steps = sorted((p for p in parent.glob("step-*") if p.name[5:].isdigit()),
                   key=lambda p: int(p.name[5:]))
    if cfg.dir and Path(cfg.dir) == parent:
        for old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
