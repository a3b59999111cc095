"""Steps per hour and generator idle time at staleness 0, 1 and 2, side by side.

The tiny model trains on single-digit addition; every completion is verified by a real sandbox
execution that takes about 200 ms (the sandboxed code domain's cost), 8 executions at a time as
a verify pool would (the sandbox pool's global and domain limits are set to ``--slots``), each
supervised from its own process as verify workers do (``--verify-in threads``: from threads of
the trainer's process, where their polling competes with generation for the GIL). The execution
starts the way the code domain's test harness does (``python3 -I -S -c``, forked by the warm
sandbox's zygote; ``--check exec``: a fresh interpreter running a file, about 2.5x its CPU).

With staleness s, batches k+1 .. k+s are generated and verified while step k trains, and each
chunk of ``--engine-batch`` samples goes to verification as soon as it is sampled (streaming);
with staleness 0 each step generates, verifies and updates in turn.

The workload is the regime overlap is for, LLM RL on code, where sampling a batch takes about as
long as verifying it; every sample is generated to ``--max-new-tokens`` (``ignore_eos``, as
vLLM's benchmarks do), so each setting does the same work whatever its policy learns to say.
By default that length is calibrated on the machine it runs on: sampling a batch at 64 tokens
and verifying it are timed, the length that would make the two equal is timed in turn, and the
length it gives is used. No schedule beats
``(g + v + u) / max(g, v, u)`` (the stages' seconds per step at staleness 0): the bench reports
that bound and the share of it reached. Settings run in rounds (0, 1, 2, then 2, 1, 0), each
round a new job with 2 warm-up steps, so a machine whose speed drifts weighs on all alike.

Besides the goals' figures it reports each stage's busy fraction (generate, verify, update), the
policy lag of the trained batches, the generating thread's seconds a step on a CPU and waiting,
runnable, for one (``generator_cpu_wait_s``: what the processes beside it take from it), and the
CPU weight the sandboxes share (``sandbox_cpu_weight``, ``TEMPER_SANDBOX_CPU_WEIGHT``). Last line: one JSON object with steps_per_hour (by
staleness), speedup_1_vs_0, generator_idle (by staleness) and the bound.

    .venv/bin/python bench/pipeline.py [--steps 12] [--backend bwrap|docker] [--verify-in processes|threads]
                                       [--slots 8] [--max-new-tokens 0] [--engine-batch 8] [--check harness|exec]

``--mode advisor`` measures the split advisor (trainer/advisor.py) instead: one domain whose
verification is slow (``--verify-s``, 0.5 s a check by default in this mode), staleness 2, the
pipeline's default verify lanes; each round runs the same job with the advisor off and on (on: after
every step its steady proposal is made when due, as the run driver does with ``autoscale: on``, with
the verify lanes bounded by ``--slots // --engine-batch``, the lanes the sandbox slots can take).
Per setting: steps per hour, each stage's idle fraction, the slowest stage (busy longest with the
advisor off) and its idle, idle seconds per step summed over the stages, and the changes made.

    .venv/bin/python bench/pipeline.py --mode advisor [--steps 16] [--slots 16] [--engine-batch 4] [--verify-s 0.5]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = "import time\ntime.sleep({sleep_s})\nprint('checked')\n"
PROBE_TOKENS = 64
"""Generation length at which sampling a batch is timed for the calibration."""
STALENESS = (0, 1, 2)


def sandbox_check(backend: str | None, check: str = "harness", sleep_s: float = 0.2) -> str:
    """One sandboxed execution of the checker (in a verify process); its verdict's status."""
    from workers.sandbox import Limits, execute

    program = PROGRAM.format(sleep_s=sleep_s)
    if check == "harness":  # as trainer/verifiers/code_harness.py starts the tests
        return execute({}, ["python3", "-I", "-S", "-c", program], Limits(cpu_s=5, wall_s=10),
                       backend=backend, domain="bench-pipeline").status
    return execute({"check.py": program}, ["python3", "check.py"], Limits(cpu_s=5, wall_s=10),
                   backend=backend, domain="bench-pipeline").status


def thread_schedstat(tid: int) -> tuple[float, float] | None:
    """Seconds thread ``tid`` of this process has run on a CPU and waited runnable for one
    (Linux's schedstat), or None where the kernel does not say."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            on_cpu, waiting = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def sandbox_cpu_weight(backend: str | None) -> int | None:
    """The CPU weight the bwrap sandboxes are configured to share (PoolConfig.cpu_weight), None
    where it does not apply (another backend, or no CPU controller of ours)."""
    from workers.sandbox import PoolConfig, cgroups, default_backend

    if (backend or default_backend()) not in ("bwrap", "bwrap-cold"):
        return None
    layout = cgroups.detect()
    return PoolConfig.from_env().cpu_weight if layout is not None and layout.cpu_parent is not None else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="measured steps per setting (after 2 warm-up steps a round)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every setting (alternating order); steps split among them")
    parser.add_argument("--slots", type=int, default=8, help="sandbox executions in parallel")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--check", choices=["harness", "exec"], default="harness",
                        help="start the checker as the code domain's harness does (python3 -I -S -c, forked by the "
                             "sandbox's zygote) or as a fresh interpreter running a file")
    parser.add_argument("--max-new-tokens", type=int, default=0,
                        help="tokens sampled per completion (every one to this length); 0: the length at which "
                             "sampling a batch takes as long as verifying it on this machine")
    parser.add_argument("--engine-batch", type=int, default=8,
                        help="rollout.batch_size: sequences sampled together; with staleness > 0 each such "
                             "chunk goes to verification as soon as it is sampled (streaming)")
    parser.add_argument("--verify-in", choices=["threads", "processes"], default="processes",
                        help="supervise the sandboxes from threads of the trainer's process, or from --slots "
                             "separate processes (as verify workers do for the run driver)")
    parser.add_argument("--mode", choices=["staleness", "advisor"], default="staleness",
                        help="staleness 0, 1 and 2 side by side, or the split advisor off and on (one slow domain)")
    parser.add_argument("--verify-s", type=float, default=None,
                        help="seconds each check sleeps in its sandbox (default 0.2; 0.5 with --mode advisor)")
    args = parser.parse_args()
    if args.verify_s is None:
        args.verify_s = 0.5 if args.mode == "advisor" else 0.2
    # The pool admits --slots executions at once (its default is 2 per CPU).
    os.environ["TEMPER_SANDBOX_GLOBAL_LIMIT"] = os.environ["TEMPER_SANDBOX_DOMAIN_LIMIT"] = str(args.slots)

    import torch

    torch.set_num_threads(1)
    from trainer.catalogue import get
    from trainer.job import Job
    from trainer.models.tiny import build_tiny
    from trainer.outcomes import Outcome, Verification
    from trainer.pipeline import engine_chunks

    if args.verify_in == "processes":
        import multiprocessing

        pool = cf.ProcessPoolExecutor(args.slots, mp_context=multiprocessing.get_context("spawn"))
    else:
        pool = cf.ThreadPoolExecutor(args.slots)
    exact = get("builtin-addition").verify

    def verify_batch(items):
        statuses = pool.map(sandbox_check, [args.backend] * len(items), [args.check] * len(items), [args.verify_s] * len(items))
        return [exact(completion, task) if status == "ok" else Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": status})
                for (completion, task), status in zip(items, statuses)]

    model = str(build_tiny(tempfile.mkdtemp() + "/m", layers=2))

    def new_job(staleness: int, max_new_tokens: int) -> Job:
        job = Job({"model": {"path": model}, "domains": {"builtin-addition": 1.0}, "seed": 0,
                   "rollout": {"prompts_per_step": 8, "n": 4, "max_new_tokens": max_new_tokens, "staleness": staleness,
                               "batch_size": args.engine_batch},
                   "optimizer": {"lr": 5e-4}}, verify_batch=verify_batch)
        job.params = replace(job.params, ignore_eos=True)  # the same work in every setting
        return job

    if args.mode == "advisor":
        out = advisor_bench(args, new_job, args.max_new_tokens or 32)
        pool.shutdown()
        print(json.dumps(out))
        return 0

    calibration = None
    tokens = args.max_new_tokens
    if tokens <= 0:
        # sampling's cost per token grows with the length (attention over the cache), so the
        # length found at the probe is timed again and corrected once
        job = new_job(0, PROBE_TOKENS)
        requests = job._draw_requests(job.config.rollout.prompts_per_step)
        tokens, calibration = PROBE_TOKENS, []
        for _ in range(2):
            job.params = replace(job.params, max_new_tokens=tokens)
            gen_s, verify_s = [], []
            for _ in range(3):
                t0 = time.perf_counter()
                trajs = [t for chunk in engine_chunks(requests, args.engine_batch) for t in job._generate(chunk)]
                t1 = time.perf_counter()
                verify_batch([(t.completion, t.task) for t in trajs])  # a whole batch, as staleness 0 does
                gen_s.append(t1 - t0)
                verify_s.append(time.perf_counter() - t1)
            g, v = sorted(gen_s)[1], sorted(verify_s)[1]
            calibration.append({"tokens": tokens, "generate_s": round(g, 3), "verify_s": round(v, 3)})
            print(f"calibration: sampling a batch at {tokens} tokens {g:.3f} s, verifying it {v:.3f} s", flush=True)
            tokens = max(16, min(1024, 8 * round(tokens * v / g / 8)))
        job.close()
        print(f"calibrated: {tokens} tokens a completion", flush=True)

    per_round = max(1, args.steps // args.rounds)
    totals = {s: {"steps": 0, "elapsed": 0.0, "windows": 0.0, "lags": [], "on_cpu_s": 0.0, "cpu_wait_s": 0.0,
                  "busy": {stage: 0.0 for stage in ("generate", "verify", "update")}} for s in STALENESS}
    for r in range(args.rounds):
        for staleness in (STALENESS if r % 2 == 0 else STALENESS[::-1]):
            job = new_job(staleness, tokens)
            # the generating thread: the rollout thread with overlap (asked before it has work
            # queued, so asking waits for nothing), the caller's own in turn
            generator = (job.pipeline.rollout_thread.submit(threading.get_native_id).result() if staleness
                         else threading.get_native_id())
            for _ in range(2):
                job.step()
            total = totals[staleness]
            sched0 = thread_schedstat(generator)
            t0 = time.perf_counter()
            for _ in range(per_round):
                metrics = job.step()
                total["lags"].append(int(metrics["batch/policy_lag"]))
                total["windows"] += metrics["pipeline/window_s"]  # these tile the measured steps' time
                for stage in total["busy"]:
                    total["busy"][stage] += metrics[f"pipeline/{stage}_busy_s"]
            elapsed = time.perf_counter() - t0
            sched1 = thread_schedstat(generator)
            if sched0 and sched1:
                total["on_cpu_s"] += sched1[0] - sched0[0]
                total["cpu_wait_s"] += sched1[1] - sched0[1]
            total["elapsed"] += elapsed
            total["steps"] += per_round
            job.close()  # batches queued ahead are dropped: they count in no setting's time
            print(f"round {r + 1} staleness {staleness}: {3600 * per_round / elapsed:.1f} steps/h", flush=True)
    pool.shutdown()

    results = {}
    for staleness, t in totals.items():
        results[staleness] = {"steps_per_hour": round(3600 * t["steps"] / t["elapsed"], 1),
                              "generator_idle": round(1 - t["busy"]["generate"] / t["windows"], 3),
                              "busy_frac": {s: round(b / t["windows"], 3) for s, b in t["busy"].items()},
                              "busy_s_per_step": {s: round(b / t["steps"], 3) for s, b in t["busy"].items()},
                              "max_policy_lag": max(t["lags"]),
                              # the generating thread's seconds a step on a CPU, and runnable but
                              # waiting for one (at staleness 0 the thread also updates)
                              "generator_on_cpu_s": round(t["on_cpu_s"] / t["steps"], 3),
                              "generator_cpu_wait_s": round(t["cpu_wait_s"] / t["steps"], 3)}
        print(f"staleness {staleness}: {results[staleness]}", flush=True)
    stages = results[0]["busy_s_per_step"]  # in turn: a step is the sum of its stages
    bound = sum(stages.values()) / max(stages.values())
    speedup = results[1]["steps_per_hour"] / results[0]["steps_per_hour"]
    out = {
        "steps_per_hour": {str(s): r["steps_per_hour"] for s, r in results.items()},
        "speedup_1_vs_0": round(speedup, 3),
        "speedup_2_vs_0": round(results[2]["steps_per_hour"] / results[0]["steps_per_hour"], 3),
        "speedup_bound": round(bound, 3), "share_of_bound_1": round(speedup / bound, 3),
        "generator_idle": {str(s): r["generator_idle"] for s, r in results.items()},
        "busy_frac": {str(s): r["busy_frac"] for s, r in results.items()},
        "busy_s_per_step": {str(s): r["busy_s_per_step"] for s, r in results.items()},
        "max_policy_lag": {str(s): r["max_policy_lag"] for s, r in results.items()},
        "generator_cpu_wait_s": {str(s): r["generator_cpu_wait_s"] for s, r in results.items()},
        "generator_on_cpu_s": {str(s): r["generator_on_cpu_s"] for s, r in results.items()},
        "samples_per_step": 32, "verify_s_per_sample": args.verify_s, "sandbox_slots": args.slots,
        "max_new_tokens": tokens, "calibration": calibration, "check": args.check, "verify_in": args.verify_in,
        "engine_batch": args.engine_batch, "steps": {str(s): t["steps"] for s, t in totals.items()},
        "sandbox_cpu_weight": sandbox_cpu_weight(args.backend),
    }
    print(json.dumps(out))
    return 0


def advisor_bench(args, new_job, tokens: int) -> dict:
    """The advisor off and on, side by side, in alternating rounds (see the module's docstring)."""
    from trainer.advisor import Advisor, Bounds, apply, pipeline_knobs

    stages = ("generate", "verify", "update")
    lanes_bound = max(1, args.slots // args.engine_batch)
    per_round = max(1, args.steps // args.rounds)
    totals = {m: {"steps": 0, "elapsed": 0.0, "windows": 0.0, "busy": dict.fromkeys(stages, 0.0), "changes": [], "knobs": []}
              for m in ("off", "on")}
    for r in range(args.rounds):
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            job = new_job(2, tokens)
            advisor = Advisor(pipeline_knobs(job.pipeline), Bounds(staleness=2, verify_lanes=lanes_bound))
            total = totals[mode]
            for i in range(2 + per_round):  # 2 warm-up steps, which the advisor sees too
                t0 = time.perf_counter()
                metrics = job.step()
                if i >= 2:
                    total["elapsed"] += time.perf_counter() - t0
                    total["windows"] += metrics["pipeline/window_s"]
                    for stage in stages:
                        total["busy"][stage] += metrics[f"pipeline/{stage}_busy_s"]
                steady = advisor.observe(metrics)
                if mode == "on" and advisor.due(steady):  # at the step boundary, as the driver does
                    apply(job.pipeline, steady)
                    advisor.applied(steady)
                    total["changes"].append({"round": r + 1, "after_step": i + 1, "knob": steady.knob, "from": steady.before,
                                             "to": steady.after, "expected_step_s": [round(x, 3) for x in steady.step_s]})
            total["steps"] += per_round
            total["knobs"].append(dict(zip(("staleness", "verify_lanes"), job.pipeline.knobs())))
            job.close()
            print(f"round {r + 1} advisor {mode}: {3600 * total['steps'] / total['elapsed']:.1f} steps/h so far", flush=True)
    results = {}
    for mode, t in totals.items():
        idle = {s: round(1 - t["busy"][s] / t["windows"], 3) for s in stages}
        results[mode] = {"steps_per_hour": round(3600 * t["steps"] / t["elapsed"], 1), "idle_frac": idle,
                         "busy_s_per_step": {s: round(t["busy"][s] / t["steps"], 3) for s in stages},
                         "idle_s_per_step": round(sum(t["windows"] - b for b in t["busy"].values()) / t["steps"], 3),
                         "changes": t["changes"], "knobs_at_end": t["knobs"]}
        print(f"advisor {mode}: {results[mode]}", flush=True)
    slowest = max(stages, key=lambda s: results["off"]["busy_s_per_step"][s])
    own = {m: max(stages, key=lambda s: results[m]["busy_s_per_step"][s]) for m in results}
    return {"mode": "advisor", "steps_per_hour": {m: r["steps_per_hour"] for m, r in results.items()},
            "speedup_on_vs_off": round(results["on"]["steps_per_hour"] / results["off"]["steps_per_hour"], 3),
            "slowest_stage": slowest, "slowest_stage_idle": {m: r["idle_frac"][slowest] for m, r in results.items()},
            "own_slowest_stage": {m: [own[m], results[m]["idle_frac"][own[m]]] for m in results},
            "idle_s_per_step": {m: r["idle_s_per_step"] for m, r in results.items()},
            "idle_frac": {m: r["idle_frac"] for m, r in results.items()},
            "changes_on": results["on"]["changes"], "knobs_at_end": {m: r["knobs_at_end"] for m, r in results.items()},
            "verify_s_per_check": args.verify_s, "sandbox_slots": args.slots, "engine_batch": args.engine_batch,
            "verify_lanes_bound": lanes_bound, "max_new_tokens": tokens, "samples_per_step": 32,
            "steps": {m: t["steps"] for m, t in totals.items()}}


if __name__ == "__main__":
    sys.exit(main())
