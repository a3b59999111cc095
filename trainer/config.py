"""Run configuration: one documented dataclass per concern, loaded from YAML, JSON or a dict.

This module must not import torch: the control plane imports it to validate run configs and to
render run forms (through :mod:`trainer.config_schema`).

It is the one source of every run setting: each field's type, default, bounds (``_num``) and help
(the docstring under it) are written here once, and the run form, the API's validation and the
Run model derive from them (``config_settings``, ``config_json_schema`` in
:mod:`trainer.config_schema`). Which settings a
control-plane run fills from its own fields is listed once too (:data:`RUN_OWNED`), as are the
defaults that differ in a run (:data:`RUN_DEFAULTS`).

>>> cfg = load_config({"rollout": {"n": 4}, "domains": {"builtin-addition": 1}})
>>> cfg.rollout.n, cfg.algorithm.name
(4, 'grpo')
>>> try:
...     load_config({"algorithm": {"clip_high": 0}, "rollout": {"n": "many"}})
... except ConfigError as err:
...     print(err)
invalid trainer config:
  algorithm.clip_high: must be greater than 0
  rollout.n: must be an integer
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import yaml

from trainer.sizes import SIZES


class ConfigError(ValueError):
    """A config that cannot be used; ``errors`` lists ``(path, message)`` for every problem."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = list(errors)
        lines = "\n".join(f"  {path}: {message}" for path, message in self.errors)
        super().__init__(f"invalid trainer config:\n{lines}")


def _num(default: Any, *, gt: float | None = None, ge: float | None = None,
         le: float | None = None, lt: float | None = None) -> Any:
    """A field with numeric bounds, checked by :func:`load_config` and exported to the schema.

    Give every number an upper bound a host survives, counts of steps and seeds included: the API
    refuses a run beyond it before anything is queued, the run driver refuses it again before it
    allocates anything, and a team's admin-set ceilings (:func:`ceiling_errors`) can only be lower.
    ``tests/trainer/test_config_bounds.py`` fails for a numeric field without one."""
    bounds = {k: v for k, v in {"gt": gt, "ge": ge, "le": le, "lt": lt}.items() if v is not None}
    return field(default=default, metadata={"bounds": bounds})


MAX_STEPS = 10_000_000
"""Any count of steps (RL, SFT, warm-up, between checkpoints or evaluations) is at most this."""
MAX_SEED = 2**32 - 1
"""Seeds are from 0 to this (what numpy and every engine accept)."""
MAX_DOMAINS = 500
"""Domains of one config (as a run's ``domains`` list allows)."""
MAX_DOMAIN_WEIGHT = 1e6
"""A domain's sampling weight is at most this (weights are normalised; the ratio is what counts)."""


# ----------------------------------------------------------------------------- concerns
@dataclass
class ModelConfig:
    """The policy: any Hugging Face causal LM in a local directory (or a hub id where reachable)."""

    path: str = ""
    """Directory (or hub id) passed to ``AutoModelForCausalLM.from_pretrained``."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for training; generation uses the same weights."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train; ``auto`` picks CUDA when available."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    reference_path: str = ""
    """Frozen reference model for the KL term; empty means the initial policy weights."""
    lean_forward: bool = True
    """Run Llama-family models (llama, mistral, qwen2) through Temper's lean forward: the same
    function in fewer ops, each distinct prompt computed once per batch; false always uses the
    model's own Hugging Face forward."""


@dataclass
class TokenizerConfig:
    """How prompts become token ids."""

    path: str = ""
    """Directory of the tokenizer; empty means the model path."""
    max_prompt_tokens: int = _num(512, ge=1, le=131_072)
    """Prompts longer than this are cut from the left."""
    use_chat_template: bool = False
    """Wrap prompts with the tokenizer's chat template when it has one."""


@dataclass
class AlgorithmConfig:
    """Advantage estimator and policy loss."""

    name: Literal["grpo", "rloo"] = "grpo"
    """``grpo``: group-normalised advantages; ``rloo``: leave-one-out baseline."""
    scale_rewards: bool = True
    """GRPO only: divide by the group's reward std; false gives Dr.GRPO (mean-centred only)."""
    clip_low: float = _num(0.2, gt=0, lt=1)
    """Lower clip of the importance ratio: ratios below 1 - clip_low get no gradient."""
    clip_high: float = _num(0.28, gt=0, le=10)
    """Upper clip of the importance ratio (DAPO clip-higher when larger than clip_low)."""
    loss_aggregation: Literal["token", "sequence"] = "token"
    """``token``: mean over all response tokens of the batch; ``sequence``: mean of per-sequence means."""
    kl_coef: float = _num(0.0, ge=0, le=100)
    """Weight of the k3 KL estimate to the frozen reference; 0 disables the reference model."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal and draw new ones to refill the batch."""
    max_refills: int = _num(2, ge=0, le=64)
    """Dynamic sampling: at most this many extra generation rounds per step."""
    updates_per_batch: int = _num(1, ge=1, le=64)
    """Optimizer steps taken on each generated batch (mini-batches of the batch)."""
    domain_balance: Literal["none", "equal"] = "none"
    """``equal``: each domain of a batch weighs the same in the policy loss, whatever its share of
    the batch's tokens (``token`` aggregation) or sequences (``sequence``): a domain of long
    completions no longer drowns the others' gradient. ``none``: every token (sequence) alike."""


@dataclass
class RolloutConfig:
    """Generation of completions by the rollout engine."""

    engine: Literal["torch", "vllm"] = "torch"
    """``torch``: batched sampling with a KV cache; ``vllm``: vLLM's offline engine."""
    prompts_per_step: int = _num(16, ge=1, le=4096)
    """Tasks drawn per step (groups per batch)."""
    n: int = _num(8, ge=1, le=1024)
    """Completions per task (group size); the adaptive budget may vary it per task."""
    max_new_tokens: int = _num(64, ge=1, le=65_536)
    """Tokens generated per model turn at most."""
    temperature: float = _num(1.0, gt=0, le=10)
    """Sampling temperature; logprobs are those of the tempered distribution."""
    top_p: float = _num(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    staleness: int = _num(0, ge=0, le=16)
    """Steps that generation may run ahead of the update (0 = synchronous)."""
    verify_budget_s: float = _num(0.0, ge=0, le=86_400)
    """Seconds a step waits for its batch's verification once generated; groups still verifying
    then join the next step, within the staleness bound (needs staleness >= 1; 0 = wait for all)."""
    autoscale: Literal["off", "on"] = "off"
    """``on``: the run driver re-plans the split from the stages' measured idle at step boundaries
    (trainer/advisor.py): the staleness in force, up to ``staleness``, and the verify lanes, each
    change a run event; ``off``: it only shows what it proposes."""
    max_turns: int = _num(1, ge=1, le=256)
    """Model turns per episode in multi-turn environments."""
    max_episode_tokens: int = _num(1024, ge=1, le=262_144)
    """Token budget per episode (model and environment tokens after the prompt)."""
    batch_size: int = _num(256, ge=1, le=4096)
    """Sequences generated together by the torch engine."""
    gpu_memory_utilization: float = _num(0.2, gt=0, le=1)
    """vLLM: share of device memory (of RAM on CPU) the engine may reserve."""
    prefix_caching: bool = True
    """vLLM: keep the KV cache of prompt blocks already computed and reuse it (a group's n samples
    share their prompt); emptied at every weight sync, so no sample reuses an older policy's cache."""
    tensor_parallel_size: int = _num(1, ge=1, le=8)
    """vLLM: GPUs one engine spans (tensor parallel). A GPU run's GPUs are split into groups of this
    many: one rank, and one engine, per group, so the data-parallel count of engines is the run's
    GPUs divided by it."""


@dataclass
class OptimizerConfig:
    """AdamW with gradient accumulation and clipping."""

    lr: float = _num(1e-4, gt=0, le=10)
    """Learning rate."""
    weight_decay: float = _num(0.0, ge=0, le=10)
    """Decoupled weight decay."""
    beta1: float = _num(0.9, ge=0, lt=1)
    """Adam beta1."""
    beta2: float = _num(0.999, ge=0, lt=1)
    """Adam beta2."""
    eps: float = _num(1e-8, gt=0, le=1)
    """Adam epsilon."""
    max_grad_norm: float = _num(1.0, ge=0, le=1e6)
    """Clip the global gradient norm to this; 0 disables clipping."""
    micro_batch_size: int = _num(64, ge=1, le=4096)
    """Sequences per forward/backward; gradients accumulate over the micro-batches."""
    warmup_steps: int = _num(0, ge=0, le=MAX_STEPS)
    """Linear learning-rate warm-up steps."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """After warm-up: keep the rate, or decay it to 0 at ``limits.max_steps`` (linearly or cosine)."""
    backend: Literal["auto", "torch", "deepspeed"] = "auto"
    """Who runs the update: ``torch`` (plain AdamW, data parallel over gloo or NCCL), ``deepspeed``
    (its engine, at ``zero_stage``), or ``auto``: DeepSpeed when ``zero_stage`` is above 0. DeepSpeed
    runs on CUDA, or on CPU ranks without one (Temper sets ``DS_ACCELERATOR=cpu``)."""
    zero_stage: Literal[0, 1, 2, 3] = 0
    """DeepSpeed ZeRO stage: 0 replicates everything, 1 splits the optimizer state over the ranks,
    2 also the gradients, 3 also the parameters (gathered whole for exports and weight syncs)."""


@dataclass
class SamplerConfig:
    """How tasks are drawn: domain mix, per-task difficulty, curriculum."""

    adaptive_budget: bool = False
    """Set each task's number of samples from its running pass rate (uncertain tasks get more)."""
    min_samples: int = _num(2, ge=2, le=1024)
    """Adaptive budget: fewest samples for a solved or hopeless task."""
    max_samples: int = _num(16, ge=2, le=1024)
    """Adaptive budget: most samples for a task whose pass rate is near 0.5."""
    pass_rate_decay: float = _num(0.9, gt=0, lt=1)
    """Running pass rate: weight kept by the old estimate at each update."""
    curriculum: bool = False
    """Raise a domain's difficulty level when its running pass rate passes the threshold."""
    curriculum_threshold: float = _num(0.8, gt=0, le=1)
    """Curriculum: domain pass rate that moves the domain up a level."""
    curriculum_min_samples: int = _num(64, ge=1, le=1_000_000_000)
    """Curriculum: samples seen at a level before it may be raised."""
    curriculum_review: float = _num(0.25, ge=0, lt=1)
    """Curriculum: share of a domain's draws taken at an easier level it has passed (uniformly among
    them), so the levels below are not forgotten while the domain works on its current one."""
    holdout_fraction: float = _num(0.0, ge=0, lt=1)
    """Share of each domain's tasks (by a hash of the task id) kept for evaluation, never drawn for training."""


@dataclass
class CheckpointConfig:
    """Where and how often a job saves itself."""

    dir: str = ""
    """Directory for checkpoints (``step-<n>`` subdirectories); empty disables saving."""
    every_steps: int = _num(0, ge=0, le=MAX_STEPS)
    """Save every this many steps; 0 saves only at the end."""
    keep_last: int = _num(2, ge=1, le=1000)
    """Older step directories beyond this many are deleted."""


@dataclass
class ArtifactsConfig:
    """Files verifications hand back (a final diff, a test report, a solid: trainer.verifiers.artifacts)."""

    keep: bool = True
    """Store them with the sampled trajectories (listed and downloadable in the trajectory explorer); false drops them."""
    max_bytes: int = _num(256 << 10, ge=0, le=16 << 20)
    """Bytes kept per trajectory; an artifact past them stays listed without its bytes."""


@dataclass
class ParallelConfig:
    """Processes of one job (``trainer/ranks.py``)."""

    ranks: int = _num(1, ge=1, le=64)
    """Ranks the job runs on, launched with torchrun: rank 0 leads (samples, verifies, records), the
    rollout is split across all of them and the update is data parallel (gloo on CPU, NCCL on
    GPUs). A GPU run has one rank per GPU it is given, so with GPUs this is 1 or their number."""
    hosts: int = _num(1, ge=1, le=64)
    """Hosts the ranks are spread over, ``ranks / hosts`` on each (torchrun's nodes): the scheduler
    gives the run that many train workers on different machines, the first one's rank 0 drives,
    and the others' ranks join it at the address it publishes through the control plane (no
    ``--standalone``). It must divide the ranks (on GPUs, the run's engines)."""
    collective_timeout_s: float = _num(600.0, ge=5, le=86_400)
    """Seconds a collective may wait, and a rank may go without a heartbeat, before the run is
    paused naming the rank, its host and its stage (it resumes from its last checkpoint)."""


@dataclass
class LimitsConfig:
    """When a job stops."""

    max_steps: int = _num(100, ge=0, le=MAX_STEPS)
    """RL steps to run."""
    max_wall_s: float = _num(0.0, ge=0, le=366 * 86_400)
    """Stop after this many seconds; 0 means no limit."""


@dataclass
class SFTConfig:
    """An optional supervised stage on reference solutions before RL."""

    steps: int = _num(0, ge=0, le=MAX_STEPS)
    """Next-token-loss steps on reference answers; 0 skips the stage."""
    lr: float = _num(1e-3, gt=0, le=10)
    """Learning rate of the SFT stage."""
    batch_size: int = _num(64, ge=1, le=4096)
    """Tasks per SFT step."""
    until_pass_rate: float = _num(0.0, ge=0, le=1)
    """A weak base in every domain: every ``check_every`` steps the stage samples ``check_tasks`` of
    each domain's training tasks (at its curriculum level, at the rollout temperature) and a domain
    whose pass rate has reached this leaves the stage; the stage ends when every domain has left,
    or after ``steps``. RL then starts where each domain has a learning signal, instead of where a
    fixed step count left it (at zero for a domain learned late, solved for one learned early).
    0 (the default): every domain trains all ``steps``."""
    check_every: int = _num(10, ge=1, le=MAX_STEPS)
    """SFT steps between the checks of ``until_pass_rate``."""
    check_tasks: int = _num(32, ge=1, le=4096)
    """Training tasks sampled per domain at each check of ``until_pass_rate``."""


@dataclass
class EvalConfig:
    """Greedy evaluation on held-out tasks while a run trains (eval curves beside training curves)."""

    every_steps: int = _num(0, ge=0, le=MAX_STEPS)
    """Evaluate every this many steps (and once before the first); 0 disables it."""
    tasks_per_domain: int = _num(16, ge=1, le=10_000)
    """Held-out tasks per domain in each evaluation (the same tasks every time)."""
    seed: int = _num(1234, ge=0, le=MAX_SEED)
    """Picks which held-out tasks are evaluated."""
    max_new_tokens: int = _num(0, ge=0, le=65_536)
    """Tokens per answer; 0 means rollout.max_new_tokens."""


@dataclass
class IntegrityConfig:
    """Watching for reward hacking while the run trains (:mod:`trainer.integrity`)."""

    canary_fraction: float = _num(0.01, ge=0, le=0.5)
    """Share of the code and repository tasks drawn each step replaced by an impossible twin (one
    expected value changed and shown in the prompt, or a conflicting duplicate assertion). A canary
    never trains the policy; any pass is evidence of gaming (hack/canary_pass_rate/<domain>, with a
    default alert). 0 plants none."""
    regrade_fraction: float = _num(0.05, ge=0, le=1)
    """Share of each step's passing code and repository trajectories graded again by a stricter
    grading of the same domain (the tests plus cases on fresh or nudged inputs, in a fresh sandbox);
    a regrade that fails is a disagreement (hack/regrade_disagreement/<domain>, with a default alert).
    The reward stays the first grading's. 0 regrades none."""


@dataclass
class TrainerConfig:
    """A whole post-training job."""

    name: str = ""
    """Label shown in logs."""
    seed: int = _num(0, ge=0, le=MAX_SEED)
    """Seeds task sampling, generation and initialisation."""
    domains: dict[str, float] = field(default_factory=lambda: {"builtin-addition": 1.0}, metadata={"schema": {
        "additionalProperties": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DOMAIN_WEIGHT},
        "minProperties": 1, "maxProperties": MAX_DOMAINS}})
    """Domain slug -> sampling weight (weights are normalised)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    """The tokenizer."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """Advantages and loss."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Generation."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    """Optimisation."""
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    """Task sampling."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    artifacts: ArtifactsConfig = field(default_factory=ArtifactsConfig)
    """Verification artifacts kept with the trajectories."""
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    """Stopping."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised warm-up stage."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Periodic evaluation on held-out tasks."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """Ranks of the job."""
    integrity: IntegrityConfig = field(default_factory=IntegrityConfig)
    """Reward-hacking watch: impossible canaries."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict; ``load_config(cfg.to_dict())`` gives an equal config."""
        return dataclasses.asdict(self)


def has_path(data: Any, path: str) -> bool:
    """Whether the nested dict ``data`` holds a value at the dotted ``path``.

    >>> has_path({"rollout": {"staleness": 1}}, "rollout.staleness"), has_path({"rollout": 3}, "rollout.n")
    (True, False)
    """
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def whole_number_at(data: Any, path: str) -> int | None:
    """The whole number (not a bool) at the dotted ``path`` of the nested dict ``data``, else None.

    >>> whole_number_at({"parallel": {"ranks": 2}}, "parallel.ranks"), whole_number_at({"parallel": {"ranks": True}}, "parallel.ranks")
    (2, None)
    >>> whole_number_at({"parallel": 3}, "parallel.ranks"), whole_number_at(None, "parallel.ranks")
    (None, None)
    """
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data if isinstance(data, int) and not isinstance(data, bool) else None


def put_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set the dotted ``path`` of the nested dict ``data`` to ``value``, making the dicts on the way.

    >>> cfg = {"rollout": {"n": 4}}
    >>> put_path(cfg, "rollout.staleness", 1); put_path(cfg, "limits.max_steps", 9); cfg
    {'rollout': {'n': 4, 'staleness': 1}, 'limits': {'max_steps': 9}}
    """
    *parents, leaf = path.split(".")
    for part in parents:
        if not isinstance(data.get(part), dict):
            data[part] = {}
        data = data[part]
    data[leaf] = value


# ----------------------------------------------------------------------------- validation
def _describe_bound(op: str, value: float) -> str:
    words = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}
    return f"must be {words[op]} {number_text(value)}"


def bound_errors(value: float, bounds: dict[str, float]) -> list[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return ["must be a finite number"]
    checks = {"gt": value > bounds.get("gt", float("-inf")),
              "ge": value >= bounds.get("ge", float("-inf")),
              "lt": value < bounds.get("lt", float("inf")),
              "le": value <= bounds.get("le", float("inf"))}
    return [_describe_bound(op, bounds[op]) for op in ("gt", "ge", "lt", "le")
            if op in bounds and not checks[op]]


def _coerce(value: Any, tp: Any, path: str, errors: list[tuple[str, str]]) -> Any:
    """Check ``value`` against the type hint ``tp``; returns the value (ints widened to float)."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path + ".", errors)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices or isinstance(value, bool):
            errors.append((path, f"must be one of {', '.join(repr(c) for c in choices)}"))
        return value
    if origin is Union:  # Optional[X]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _coerce(value, args[0], path, errors)
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            errors.append((path, "must be a mapping"))
            return {}
        return {str(k): _coerce(v, val_tp, f"{path}.{k}", errors) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            errors.append((path, "must be true or false"))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append((path, "must be an integer"))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append((path, "must be a number"))
            return value
        if not math.isfinite(value):  # YAML's .nan and .inf, JSON's NaN and Infinity
            errors.append((path, "must be a finite number"))
            return value
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            errors.append((path, "must be a string"))
        return value
    raise TypeError(f"unsupported config type {tp!r} at {path}")  # a bug in this module


def _build(cls: type, data: Any, prefix: str, errors: list[tuple[str, str]]) -> Any:
    """Instantiate the dataclass ``cls`` from ``data``, collecting every error."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        errors.append((prefix.rstrip(".") or "(root)", "must be a mapping"))
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            errors.append((f"{prefix}{key}", "unknown field"))
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            continue
        path = f"{prefix}{name}"
        n_before = len(errors)
        value = _coerce(data[name], hints[name], path, errors)
        bounds = f.metadata.get("bounds")
        if bounds and len(errors) == n_before:
            errors.extend((path, msg) for msg in bound_errors(value, bounds))
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError:
        return cls()


def _cross_check(cfg: TrainerConfig) -> list[tuple[str, str]]:
    """Rules that involve more than one field."""
    errors: list[tuple[str, str]] = []
    if not cfg.domains:
        errors.append(("domains", "must name at least one domain"))
    if len(cfg.domains) > MAX_DOMAINS:
        errors.append(("domains", f"must name at most {MAX_DOMAINS} domains"))
    for slug, weight in cfg.domains.items():
        if isinstance(weight, float) and weight <= 0:
            errors.append((f"domains.{slug}", "must be greater than 0"))
        elif isinstance(weight, float) and weight > MAX_DOMAIN_WEIGHT:
            errors.append((f"domains.{slug}", f"must be at most {MAX_DOMAIN_WEIGHT:g}"))
    if cfg.sampler.min_samples > cfg.sampler.max_samples:
        errors.append(("sampler.min_samples", "must be at most sampler.max_samples"))
    if cfg.rollout.verify_budget_s > 0 and cfg.rollout.staleness < 1:
        errors.append(("rollout.verify_budget_s", "needs rollout.staleness of at least 1 (a group left "
                                                  "verifying joins a later step, one update staler)"))
    if cfg.rollout.autoscale == "on" and cfg.rollout.staleness < 1:
        errors.append(("rollout.autoscale", "on needs rollout.staleness of at least 1 (a run in turn has no staleness "
                                            "in force or verify lanes to change between steps)"))
    if cfg.rollout.tensor_parallel_size > 1 and cfg.rollout.engine != "vllm":
        errors.append(("rollout.tensor_parallel_size", "tensor parallel generation needs rollout.engine vllm"))
    deepspeed = cfg.optimizer.backend == "deepspeed" or (cfg.optimizer.backend == "auto" and cfg.optimizer.zero_stage > 0)
    if cfg.optimizer.backend == "torch" and cfg.optimizer.zero_stage > 0:
        errors.append(("optimizer.zero_stage", f"ZeRO stage {cfg.optimizer.zero_stage} needs optimizer.backend "
                                               "deepspeed (or auto); the torch backend has no ZeRO"))
    if deepspeed and cfg.sft.steps > 0:
        errors.append(("sft.steps", "an SFT stage runs with the plain torch optimizer, not DeepSpeed "
                                    "(optimizer.backend or zero_stage): run it as a run of its own first "
                                    "and start this one from its checkpoint"))
    if cfg.rollout.n < 2 and not cfg.sampler.adaptive_budget:
        errors.append(("rollout.n", "must be at least 2 (advantages compare samples of a group)"))
    for size in SIZES:
        value, how = size.value(cfg)
        if value > size.bound:
            errors.append((size.path, f"{how} is {value} {size.name.replace('_', ' ')}; at most {size.bound} are allowed"))
    return errors


def number_text(value: float) -> str:
    """A number as a person writes it: ``512``, ``0.5``, ``1e+06`` (a float that is whole is
    written as an integer below a billion)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e9:
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:g}"


def load_config(source: str | os.PathLike | dict[str, Any] | TrainerConfig) -> TrainerConfig:
    """Read a config from a YAML/JSON file path or a dict; raise :class:`ConfigError` if invalid.

    Every problem is reported at once, each with its dotted path. ``model.path`` may be empty here
    (a form being filled in); :class:`trainer.job.Job` refuses to start without it.
    """
    if isinstance(source, TrainerConfig):
        source = source.to_dict()
    if isinstance(source, (str, os.PathLike)):
        source = _read_file(os.fspath(source))
    errors: list[tuple[str, str]] = []
    cfg = _build(TrainerConfig, source, "", errors)
    if not errors:
        errors = _cross_check(cfg)
    if errors:
        raise ConfigError(errors)
    return cfg


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError([("(file)", f"cannot read {path}: {exc.strerror}")]) from None
    try:
        if path.endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is reported the same way
        raise ConfigError([("(file)", f"cannot parse {path}: {exc}")]) from None
    if not isinstance(data, dict):
        raise ConfigError([("(root)", "must be a mapping")])
    return data
