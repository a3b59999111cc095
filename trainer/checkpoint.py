"""A checkpoint is one directory: everything a job needs to continue exactly where it stopped.

    step-100/
      model/          weights and tokenizer (``save_pretrained``)
      optimizer.pt    {"backend": the RL optimizer (DeepSpeed: its stage and ranks), "sft_backend": the SFT optimizer or None}
      zero/           DeepSpeed only: every rank's optimizer shard (ZeRO-3: parameter shard too) and the schedule
      rng.pt          {"engine": engine RNG, "torch": torch RNG, "sft_rng": SFT task RNG,
                       "sft_check_rng": the RNG of sft.until_pass_rate's checks,
                       "pending": batches generated ahead, [{"trajs", "policy_version", "carried"}],
                       "ranks": each rank's {"engine", "torch"} on several ranks, else None}
      state.json      {"step", "sft_steps_done", "sft_left", "sft_checked_at", "initial_model_path", "config",
                       "sampler"}

It is written next to its place (``step-100.tmp``) and renamed, so a crash never leaves half of
one; older ``step-*`` siblings in ``checkpoint.dir`` beyond ``checkpoint.keep_last`` are removed.
A write that the storage refuses (no space, read-only, permission, I/O error) removes what it
wrote and raises :class:`CheckpointWriteError`: the caller knows it is the storage, not the job,
and the checkpoints already there are untouched.
"""
from __future__ import annotations

import errno
import json
import os
import re
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
    rank_rng: list[dict] | None = None
    """Each rank's ``{"engine", "torch"}`` RNG states, in rank order, when the job ran on several
    (each rank samples its own share of the groups); a resume on as many ranks gives each its own."""

    def save(self, directory: str | os.PathLike, model, tokenizer, shards: Path | None = None) -> Path:
        """Write the checkpoint (and ``model``, ``tokenizer``) to ``directory``; prune old ones.
        ``shards``: a folder the ranks wrote their DeepSpeed shards to, moved in as ``zero/``."""
        path = Path(directory)
        tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            model.save_pretrained(tmp / "model")
            tokenizer.save_pretrained(tmp / "model")
            torch.save({"backend": self.optimizer, "sft_backend": self.sft["optimizer"]}, tmp / "optimizer.pt")
            torch.save({"engine": self.engine_rng, "torch": self.torch_rng,
                        "pending": [{"trajs": b.trajs, "policy_version": b.policy_version, "carried": b.carried}
                                    for b in self.ahead],
                        "sft_rng": self.sft["rng"], "sft_check_rng": self.sft.get("check_rng"),
                        "ranks": self.rank_rng}, tmp / "rng.pt")
            if shards is not None:
                shards.rename(tmp / "zero")
            state = {"step": self.step, "sft_steps_done": self.sft["steps_done"], "sft_left": self.sft.get("left", {}),
                     "sft_checked_at": self.sft.get("checked_at"),
                     "initial_model_path": self.config.model.path,
                     "config": self.config.to_dict(), "sampler": self.sampler}
            with open(tmp / "state.json", "w") as f:  # last: a directory with state.json is complete
                f.write(json.dumps(state, indent=1))
                f.flush()
                os.fsync(f.fileno())
            # The old copy of this step (saved again) moves aside first, so ``path`` is always a
            # whole checkpoint or absent, never half removed.
            shutil.rmtree(old, ignore_errors=True)
            if path.exists():
                path.rename(old)
            tmp.rename(path)
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if shards is not None:
                shutil.rmtree(shards, ignore_errors=True)
            if old.is_dir() and not path.exists():
                try:
                    old.rename(path)  # the earlier copy of this step stays what it was
                except OSError:
                    pass  # it stays whole under step-N.old; the run resumes from an earlier one
            cause = storage_error(exc, path.parent)
            if cause is None:
                raise
            raise CheckpointWriteError(self.step, path, cause) from exc
        shutil.rmtree(old, ignore_errors=True)
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
            ahead.append(Batch(saved["trajs"], saved["policy_version"], carried=saved.get("carried", False)))
        return cls(step=state["step"], config=config, sampler=state["sampler"], optimizer=opt["backend"],
                   engine_rng=rng["engine"], torch_rng=rng["torch"], ahead=ahead,
                   sft={"steps_done": state["sft_steps_done"], "rng": rng["sft_rng"],
                        "check_rng": rng.get("sft_check_rng"), "left": state.get("sft_left", {}),
                        "checked_at": state.get("sft_checked_at"),
                        "optimizer": opt["sft_backend"]}, rank_rng=rng.get("ranks"))


def prune(parent: Path, cfg: CheckpointConfig) -> None:
    """Keep the last ``keep_last`` ``step-*`` checkpoints when ``parent`` is ``checkpoint.dir``."""
    keep = cfg.keep_last
    steps = sorted((p for p in parent.glob("step-*") if p.name[5:].isdigit()),
                   key=lambda p: int(p.name[5:]))
    if cfg.dir and Path(cfg.dir) == parent:
        for old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


class CheckpointWriteError(OSError):
    """The storage refused a checkpoint (``errno``, ``strerror`` are its error's); nothing of the
    checkpoint was left behind and the earlier ones are intact."""

    def __init__(self, step: int, path: Path, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.step = step
        self.path = Path(path)
        self.cause = cause

    def __str__(self) -> str:
        return f"checkpoint at step {self.step} could not be written to {self.path.parent}: {self.cause}"


_OS_ERROR = re.compile(r"os error (\d+)")
"""How Rust libraries (safetensors, tokenizers) spell the errno of a failed write."""
_TORCH_WRITE = ("file write failed", "unexpected pos", "iostream error")
"""How torch.save's C++ writer reports a write the file system refused (it keeps no errno)."""


def storage_error(exc: BaseException, directory: Path) -> OSError | None:
    """The storage error behind a failed checkpoint write, or None when it is not one (a bug in the
    job, which must fail loudly). Libraries report a full or broken disk differently: Python raises
    OSError, safetensors a SafetensorError naming the errno, torch a RuntimeError with no errno;
    for those a small probe write in ``directory`` says what the storage answers now.

    >>> storage_error(OSError(errno.ENOSPC, "No space left on device"), Path(".")).errno == errno.ENOSPC
    True
    >>> storage_error(Exception("Error while serializing: I/O error: File too large (os error 27)"), Path(".")).errno
    27
    >>> storage_error(KeyError("config"), Path(".")) is None
    True
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    found = _OS_ERROR.search(text)
    if found:
        code = int(found.group(1))
        return OSError(code, os.strerror(code))
    if any(marker in text for marker in _TORCH_WRITE):
        return _probe(directory) or OSError(errno.EIO, f"write failed ({text.strip()[:200]})")
    return None


def _probe(directory: Path) -> OSError | None:
    """What the storage says to a small synced write in ``directory`` (None: it took it)."""
    probe = directory / f".probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
        return None
    except OSError as err:
        return err
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
