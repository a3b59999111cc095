"""The split advisor: from the stages' measured busy time, the change that would cut idle most.

The pipeline records, per step, each stage's busy seconds (``pipeline/<stage>_busy_s``, at least
one job of the stage running) and the step's window (``pipeline/window_s``); its idle fraction is
the rest. :func:`proposals` reads a window of these, the knobs in force and their bounds, and
returns the changes worth making, best first, each with the knob, from -> to, the stage that
idles and the bottleneck, and the expected effect under this model of the pipeline:

- In turn (staleness 0) a step is the sum of its stages: ``W = g + v + u + o`` (``o``: the
  caller's bookkeeping). Overlapped (staleness ``s >= 1``) the stages run at once and a step is
  bounded by the slowest: ``W = max(g, v, u) + e``, where ``e`` is what no overlap hid (the first
  chunk's generation before any verification, the last chunk's verification after generation,
  the wait at the step boundary).
- ``e`` shrinks in proportion to the batches queued ahead: ``e(s') = e * s / s'`` (a deeper queue
  absorbs the fill and the stragglers); the stages' own seconds do not change with ``s``.
- Verification divides among its lanes (verify calls in flight per domain): ``v(c') = v * c / c'``,
  up to the lanes the verify workers can take (:attr:`Bounds.verify_lanes`: the domains' sandbox
  slots); generation and the update do not change with it.

Knobs the run driver may change at a step boundary (``applicable``): the staleness in force, from
1 up to the run's bound (the bound is the run's setting and is never exceeded: a batch older than
it is still refused), and the verify lanes within their bound. The others are advice for a person:
more verify workers or sandbox slots when the lanes are at their bound, an overlapped pipeline for
a run in turn. :class:`Advisor` adds the hysteresis: a proposal is ready only after it has led
``patience`` windows in a row (on the mean of the last ``history`` windows), no change is made for
``cooldown`` windows after one, and a change that undoes the last one is not made within
``hold`` windows of it, so the split does not flap.

>>> w = Window(generate_s=0.5, verify_s=2.0, update_s=0.3, window_s=2.2)
>>> best = proposals(w, Knobs(staleness=1, verify_lanes=2), Bounds(staleness=2, verify_lanes=4))[0]
>>> best.knob, best.before, best.after, best.bottleneck, round(best.step_s[1], 2)
('verify_lanes', 2, 4, 'verify', 1.2)
"""
from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field, replace

STAGES = ("generate", "verify", "update")
MIN_GAIN = 0.05
"""A change is proposed only when the model expects it to cut the step time by at least this share."""
FRESHER_COST = 0.02
"""Staleness is lowered (fresher batches) when the model expects it to cost at most this share."""
MAX_VERIFY_LANES = 8
"""Verify lanes per domain at most, whatever the verify workers could take."""
SPARE_IDLE = 0.5
"""Verify lanes are given back when verification idles at least this share of the step and fewer
lanes still keep it off the critical path."""


@dataclass(frozen=True)
class Knobs:
    """What the driver can set at a step boundary."""

    staleness: int
    """Staleness in force: batches a step consumes are at most this many updates old (0: in turn)."""
    verify_lanes: int
    """Verify calls in flight per domain (the overlapped pipeline's verify threads)."""


@dataclass(frozen=True)
class Bounds:
    """How far each knob may go."""

    staleness: int
    """The run's staleness setting: the most the staleness in force may be (0: the run is in turn)."""
    verify_lanes: int
    """The most verify lanes the verify workers can take (more would only queue at them)."""


@dataclass(frozen=True)
class Window:
    """Seconds each stage was busy in a stretch of steps, and how long the stretch was."""

    generate_s: float
    verify_s: float
    update_s: float
    window_s: float

    @classmethod
    def from_metrics(cls, metrics: dict[str, float]) -> Window:
        """A step's window from its ``pipeline/*`` metrics.

        >>> Window.from_metrics({"pipeline/generate_busy_s": 1, "pipeline/verify_busy_s": 2,
        ...                      "pipeline/update_busy_s": 0.5, "pipeline/window_s": 3}).busy("verify")
        2.0
        """
        return cls(*(float(metrics[f"pipeline/{stage}_busy_s"]) for stage in STAGES), float(metrics["pipeline/window_s"]))

    @classmethod
    def mean(cls, windows: list[Window]) -> Window:
        n = max(len(windows), 1)
        return cls(*(sum(getattr(w, f) for w in windows) / n for f in ("generate_s", "verify_s", "update_s", "window_s")))

    def busy(self, stage: str) -> float:
        return getattr(self, f"{stage}_s")

    def idle_frac(self, stage: str) -> float:
        return max(0.0, 1.0 - self.busy(stage) / max(self.window_s, 1e-9))

    def bottleneck(self) -> str:
        """The stage busy longest."""
        return max(STAGES, key=self.busy)


@dataclass(frozen=True)
class Proposal:
    """One change to the split, with why and what the model expects of it."""

    knob: str
    """``staleness``, ``verify_lanes`` (the driver may apply these) or ``verify_workers``, ``overlap``
    (advice for a person)."""
    before: int
    after: int
    applicable: bool
    """The driver may make it at a step boundary (else a person does: a deployment, a new run)."""
    bottleneck: str
    """The stage busy longest in the window."""
    idle_stage: str
    """The stage whose idle the change cuts most."""
    reason: str
    step_s: tuple[float, float]
    """A step's seconds, measured -> expected."""
    idle: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Each stage's idle fraction, measured -> expected."""

    @property
    def gain(self) -> float:
        """The share of a step's time the change is expected to save."""
        return 1.0 - self.step_s[1] / max(self.step_s[0], 1e-9)

    def as_dict(self) -> dict:
        """JSON-safe (a run event's data, the run page's card)."""
        out = asdict(self)
        out.update(step_s=[round(x, 4) for x in self.step_s], gain=round(self.gain, 4),
                   idle=[[s, round(a, 4), round(b, 4)] for s, (a, b) in self.idle.items()])  # a list keeps the stages' order
        return out


def expected(window: Window, knobs: Knobs, new: Knobs) -> Window:
    """The window the model expects with ``new`` knobs in force instead of ``knobs``."""
    g, v, u, w = window.generate_s, window.verify_s, window.update_s, window.window_s
    v2 = v * knobs.verify_lanes / max(new.verify_lanes, 1)
    if knobs.staleness == 0:
        rest = max(w - (g + v + u), 0.0)
        w2 = (g + v2 + u + rest) if new.staleness == 0 else max(g, v2, u) + rest
    else:
        rest = max(w - max(g, v, u), 0.0)
        w2 = max(g, v2, u) + rest * knobs.staleness / max(new.staleness, 1)
    return Window(g, v2, u, max(w2, g, v2, u))


def _proposal(window: Window, knobs: Knobs, knob: str, before: int, after: int, new: Knobs, *,
              applicable: bool, reason: str) -> Proposal:
    """``knob`` from ``before`` to ``after``, which the model reads as ``new`` knobs in force."""
    after_w = expected(window, knobs, new)
    idle = {s: (window.idle_frac(s), after_w.idle_frac(s)) for s in STAGES}
    idle_stage = max(STAGES, key=lambda s: idle[s][0] - idle[s][1])
    return Proposal(knob=knob, before=before, after=after, applicable=applicable, bottleneck=window.bottleneck(),
                    idle_stage=idle_stage, reason=reason, step_s=(window.window_s, after_w.window_s), idle=idle)


def _change(window: Window, knobs: Knobs, knob: str, after: int, *, reason: str) -> Proposal:
    """A change of a knob the driver sets (``staleness``, ``verify_lanes``)."""
    return _proposal(window, knobs, knob, getattr(knobs, knob), after, replace(knobs, **{knob: after}),
                     applicable=True, reason=reason)


def proposals(window: Window, knobs: Knobs, bounds: Bounds) -> list[Proposal]:
    """The changes worth making to the split, best first (an empty list: it is balanced as it can
    be with what the driver controls). Speed-ups (at least :data:`MIN_GAIN` of the step) come
    first, largest first; then changes that free resources or fresher batches at no cost."""
    out: list[Proposal] = []
    neck = window.bottleneck()
    idle = {s: window.idle_frac(s) for s in STAGES}
    words = ", ".join(f"{s} idles {idle[s]:.0%}" for s in STAGES)
    if knobs.staleness == 0:  # in turn: only a new run can overlap the stages
        out.append(_proposal(window, knobs, "overlap", 0, 1, replace(knobs, staleness=1), applicable=False,
                             reason=f"the stages run in turn ({words}); with staleness 1 they overlap and a step is "
                                    f"bounded by the slowest, {neck}: start the next run with staleness >= 1"))
        return [p for p in out if p.gain >= MIN_GAIN]
    if knobs.verify_lanes < bounds.verify_lanes and neck == "verify":
        out.append(_change(window, knobs, "verify_lanes", min(2 * knobs.verify_lanes, bounds.verify_lanes),
                           reason=f"verification is the bottleneck ({words}): more verify lanes "
                                  f"divide it (at most {bounds.verify_lanes}: what the verify workers can take)"))
    if knobs.verify_lanes >= bounds.verify_lanes and neck == "verify":
        out.append(_proposal(window, knobs, "verify_workers", bounds.verify_lanes, 2 * bounds.verify_lanes,
                             replace(knobs, verify_lanes=2 * knobs.verify_lanes), applicable=False,
                             reason=f"verification is the bottleneck ({words}) and its lanes are at the most the "
                                    f"verify workers take: twice the verify workers or the domain's sandbox slots"))
    if knobs.staleness < bounds.staleness:
        out.append(_change(window, knobs, "staleness", knobs.staleness + 1,
                           reason=f"{neck} is the bottleneck and the step has "
                                  f"{max(window.window_s - window.busy(neck), 0):.2f} s that no overlap hides "
                                  f"({words}): one more batch queued ahead, within the run's bound of {bounds.staleness}"))
    speedups = sorted((p for p in out if p.gain >= MIN_GAIN), key=lambda p: -p.gain)
    if speedups:
        return speedups
    spare: list[Proposal] = []
    if knobs.verify_lanes > 1 and idle["verify"] >= SPARE_IDLE:
        fewer = _change(window, knobs, "verify_lanes", knobs.verify_lanes - 1,
                        reason=f"verification idles {idle['verify']:.0%} of the step ({words}): one verify lane "
                               f"fewer leaves the step as fast and frees the verify workers for other runs")
        if fewer.gain > -FRESHER_COST:
            spare.append(fewer)
    if knobs.staleness > 1:
        fresher = _change(window, knobs, "staleness", knobs.staleness - 1,
                          reason=f"little of the step waits on the pipeline ({words}): one batch fewer queued "
                                 f"ahead costs almost nothing and trains on fresher batches")
        if fresher.gain > -FRESHER_COST:
            spare.append(fresher)
    return spare


class Advisor:
    """:func:`proposals` over a run's steps, with hysteresis (see the module's docstring).

    >>> adv = Advisor(Knobs(1, 2), Bounds(2, 4), patience=2)
    >>> m = {"pipeline/generate_busy_s": 0.5, "pipeline/verify_busy_s": 2.0,
    ...      "pipeline/update_busy_s": 0.3, "pipeline/window_s": 2.2}
    >>> adv.observe(m) is None, adv.observe(m).knob, adv.due(adv.steady)
    (True, 'verify_lanes', True)
    """

    def __init__(self, knobs: Knobs, bounds: Bounds, *, history: int = 3, patience: int = 2,
                 cooldown: int = 3, hold: int = 20) -> None:
        self.knobs, self.bounds = knobs, bounds
        self.history, self.patience, self.cooldown, self.hold = history, patience, cooldown, hold
        self.windows: deque[Window] = deque(maxlen=history)
        self.current: Proposal | None = None
        """The best proposal on the last windows, steady or not."""
        self.steady: Proposal | None = None
        """The proposal that has led ``patience`` windows in a row (what the run page shows)."""
        self.streak = 0
        self.since_change = cooldown
        self.last_change: tuple[str, int, int] | None = None

    def observe(self, metrics: dict[str, float]) -> Proposal | None:
        """Fold one step's ``pipeline/*`` metrics in; the steady proposal now, or None (balanced,
        or nothing has led long enough)."""
        self.windows.append(Window.from_metrics(metrics))
        self.since_change += 1
        found = proposals(Window.mean(list(self.windows)), self.knobs, self.bounds)
        best = found[0] if found else None
        same = best is not None and self.current is not None and (best.knob, best.after) == (self.current.knob, self.current.after)
        self.streak = self.streak + 1 if same else 1
        self.current = best
        self.steady = best if best is None or self.streak >= self.patience else None
        return self.steady

    def due(self, proposal: Proposal | None) -> bool:
        """Whether the driver may make ``proposal`` now: one it applies, not within ``cooldown``
        windows of the last change, and not undoing that change within ``hold`` windows."""
        if proposal is None or not proposal.applicable or self.since_change < self.cooldown:
            return False
        if self.last_change is not None and self.since_change < self.hold:
            knob, before, after = self.last_change
            if proposal.knob == knob and (proposal.after - proposal.before) * (after - before) < 0:
                return False
        return True

    def applied(self, proposal: Proposal) -> None:
        """``proposal`` is in force from the next step: the windows measured before it describe
        another split, and the next change waits ``cooldown`` windows."""
        self.knobs = replace(self.knobs, **{proposal.knob: proposal.after})
        self.last_change = (proposal.knob, proposal.before, proposal.after)
        self.windows.clear()
        self.since_change = 0
        self.streak = 0
        self.current = self.steady = None


def pipeline_knobs(pipeline) -> Knobs:
    """The knobs in force in a :class:`trainer.pipeline.Pipeline`."""
    staleness, lanes = pipeline.knobs()
    return Knobs(staleness=staleness, verify_lanes=lanes)


def apply(pipeline, proposal: Proposal) -> None:
    """Make an applicable ``proposal`` in ``pipeline`` (between steps: it takes effect at the next)."""
    if not proposal.applicable:
        raise ValueError(f"{proposal.knob} is not a knob the driver changes")
    pipeline.set_knobs(**{proposal.knob: proposal.after})
