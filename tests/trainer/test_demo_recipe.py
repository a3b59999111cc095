"""The demo's SFT stage leaves every domain something to learn from: at its learning rate two-bit
parity is learned, not collapsed into one answer for every string (which a higher rate did: the
loss pinned at ln 2 / 2 and RL never left it; docs/trainer.md)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_demo_sft_learns_two_bit_parity_instead_of_a_constant(tmp_path):
    import torch

    torch.set_num_threads(1)
    from controlplane.web.management.commands.demo_setup import DEMO_CONFIG
    from trainer.job import Job
    from trainer.models.tiny import build_tiny
    from trainer.tasks.builtin import PARITY

    sft = DEMO_CONFIG["sft"]
    job = Job({"model": {"path": str(build_tiny(tmp_path / "tiny", seed=0))}, "seed": 0,
               "domains": {"builtin-parity": 1.0}, "rollout": dict(DEMO_CONFIG["rollout"]),
               "sft": {"lr": sft["lr"], "batch_size": sft["batch_size"]}})
    try:
        losses = job.sft(sft["steps"])
        tasks = [PARITY.sample(_Fixed(bits), 0) for bits in ("00", "01", "10", "11")]
        assert {t.answer for t in tasks} == {"0", "1"}
        assert job.evaluate(tasks)["exact"] == 1.0, "the SFT base answers two-bit parity"
        assert sum(losses[-20:]) / 20 < 0.1  # far below ln 2 / 2 = 0.35, the loss of a 50/50 guess
    finally:
        job.close()


class _Fixed:
    """A random.Random stand-in whose choices spell ``bits``."""

    def __init__(self, bits: str):
        self.bits = iter(bits)

    def choice(self, alphabet):
        return next(self.bits)
