"""The trainer settings a control-plane run fills from fields of its own, and a run's defaults.

Listed once, here: the API refuses these settings in a run's ``config`` (naming the run field to
use), the run body's schema, the run form and the API's output take each scalar one's field from
the setting (controlplane/runs/schemas.py), and ``RunSpec`` (controlplane/runs/spec.py) fills each
one from its source when it builds a run's trainer config.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.holdout import HOLDOUT_FRACTION


@dataclass(frozen=True)
class RunOwned:
    """A setting that a control-plane run fills from one of its own fields; a run's ``config``
    section may not set it."""

    path: str
    """The setting's dotted path in :class:`TrainerConfig`."""
    source: str
    """Where the run takes it from: a field of the run's API body (``staleness``, ``budget.steps``),
    or, when ``assigned``, what the control plane gives every run (its ``id``, its ``storage``)."""
    assigned: bool = False
    """No field of the API body sets it: the control plane assigns it."""
    schema: tuple[tuple[str, Any], ...] = ()
    """For a run field that takes its JSON Schema from the setting (a number such as
    ``staleness``): the keys that differ from the setting's, as ``(key, value)`` pairs (a value of
    None drops the key). Empty for one the run body describes itself (the base model, the
    domains) and for an assigned one."""
    scalar: bool = True
    """The run field is the setting's own value (``staleness``), not a structure of the run body
    (``domains``) or a reference the control plane resolves (``base_model``)."""

    def refusal(self) -> str:
        """Why a run's ``config`` may not set this setting (the API's error message)."""
        if self.assigned:
            return f"set by the control plane from the run's {self.source}; leave it out"
        return f"set it with the run's '{self.source}' field instead"


RUN_OWNED: tuple[RunOwned, ...] = (
    RunOwned("name", "id", assigned=True, scalar=False),
    RunOwned("model.path", "base_model", scalar=False),
    RunOwned("domains", "domains", scalar=False),
    RunOwned("rollout.staleness", "staleness"),
    RunOwned("rollout.autoscale", "autoscale"),
    RunOwned("limits.max_steps", "budget.steps", schema=(("minimum", 1),)),  # a run takes at least one step
    RunOwned("limits.max_wall_s", "budget.wall_s",  # null, not 0, means no limit in a run body
             schema=(("type", ["number", "null"]), ("minimum", None), ("exclusiveMinimum", 0), ("default", None),
                     ("description", "Stop after this many seconds; null means no limit."))),
    RunOwned("checkpoint.dir", "storage", assigned=True, scalar=False),
)
"""The settings a run owns, listed once: the API refuses them in a run's ``config`` (naming the
run field to use), the run body's schema and the run form take each scalar one's field from the
setting, and the control plane's ``RunSpec`` fills each one from its source when it builds the
run's trainer config. A run field left out (or null, where its schema allows it, as ``budget.wall_s``
does) is the setting's default."""

RUN_DEFAULTS: dict[str, Any] = {
    "checkpoint.every_steps": 5,
    "sampler.holdout_fraction": HOLDOUT_FRACTION,
}
"""Settings whose default differs in a run, by path: a run checkpoints every few steps (a
preempted or failed worker loses little), and keeps the model registry's held-out share of every
domain out of training. The run form shows these defaults; the run driver applies them where the
run's ``config`` leaves the setting out."""
