"""Build a package's swe-pkg tasks: inject bugs, keep those its own tests catch, write the set.

For one pinned package, everything measured in the sandbox through the trusted runner
(:mod:`trainer.families.pkgs.runner`) and an executor handed in (the trainer never names the
sandbox runtime):

1. the original suite runs twice (the first time with line coverage of the package's source
   files); ``passing`` is what passed both times;
2. candidate mutations (:mod:`trainer.families.pkgs.mutate`) are taken only on lines the suite
   executed, shuffled by a seed derived from the pin, and run many to a job (the runner writes
   each mutant's file before its pytest child starts and restores it after; each run has a time
   limit from the original's);
3. a single mutant is kept when the run finished, collected what the original did, at least one
   passing test now fails with a record (fail-to-pass; no more than :attr:`BuildConfig.max_f2p`)
   and every other passing test still passes (pass-to-pass);
4. kept mutants become level-1 and level-2 tasks (one bug; the file named or not); pairs of kept
   mutants in two different files, run together and kept by the same rule, become level-3 tasks;
5. each task's prompt is an issue written from its failing tests (:mod:`trainer.families.pkgs.issues`).

The result is deterministic for a pin and a seed (the order of the work does not depend on which
job finishes first) and is written as ``tasks/<name>.json.gz``.
"""
from __future__ import annotations

import gzip
import io
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trainer.families.pkgs import issues, mutate, runner
from trainer.families.pkgs.pins import PINS, Pin, is_source_path, source_tree
from trainer.verifiers.limits import Limits
from trainer.verifiers.patches import tree_diff

TASKS_DIR = Path(__file__).with_name("tasks")
"""Where built task sets are written (committed with the code)."""
Executor = Callable[[dict[str, str], list[str], Limits], Any]
"""``execute(files, command, limits) -> verdict`` (``status``, ``stdout``, ``stderr``): one sandbox job."""
DRY_WAVES = 3
"""Waves of jobs in a row that keep no mutant before a package's build stops short of its target."""
Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``."""


@dataclass(frozen=True)
class BuildConfig:
    """How many tasks a package build aims for, and what it may spend."""

    seed: int = 0
    """Seed of the shuffles and of the prompts' wording."""
    level1: int = 18
    """Level-1 tasks wanted (one bug, file named)."""
    level2: int = 18
    """Level-2 tasks wanted (one bug, file not named)."""
    level3: int = 12
    """Level-3 tasks wanted (two bugs in two files); 0 for a one-file package."""
    max_mutants: int = 480
    """Most single mutants tried."""
    batch: int = 16
    """Mutants per sandbox job."""
    parallel: int = 2
    """Sandbox jobs at once."""
    max_f2p: int = 25
    """Most tests one bug may break (a bug that breaks half the suite is no issue to file)."""
    child_memory_mb: int = 1024
    """Address space of each pytest child."""


@dataclass(frozen=True)
class Baseline:
    """The original suite, as measured."""

    passing: frozenset[str]
    """Tests that passed in both runs."""
    collected: int
    """Tests collected."""
    coverage: dict[str, list[int]]
    """Executed lines per source file."""
    run_s: float
    """Seconds of the plain run."""


@dataclass(frozen=True)
class Kept:
    """A mutant whose tests say it is a bug."""

    index: int
    """Its place in the candidate order."""
    files: dict[str, str]
    """Changed path -> mutated text."""
    mutations: list[dict[str, Any]]
    """``{file, line, kind, original, replacement}`` per mutation."""
    f2p: list[str]
    """Tests that passed on the original and fail on the mutant."""
    failures: dict[str, str]
    """f2p test -> pytest's message."""


def run_limit(base: Baseline) -> float:
    """Seconds a mutant's run may take: four times the original's, at least four (a mutant that
    loops forever costs this much)."""
    return max(4.0, 4.0 * base.run_s)


def deselect_args(pin: Pin) -> list[str]:
    """pytest arguments leaving out the pin's deselected tests."""
    return [arg for node in pin.deselect for arg in ("--deselect", node)]


def job_limits(runs: int, run_s: float) -> Limits:
    """Limits of a job of ``runs`` runs each bounded by ``run_s`` seconds."""
    budget = min(3600.0, 30.0 + runs * run_s * 1.5)
    return Limits(cpu_s=budget, wall_s=budget, memory_mb=3072, pids=128, output_bytes=64 << 20, tmpfs_mb=512)


def _run(execute: Executor, tree: dict[str, str], runs: list[dict[str, Any]], run_s: float) -> list[runner.Results]:
    job = runner.batch_job(tree, runs)
    verdict = execute(job.files, job.command, job_limits(len(runs), run_s))
    stdout = getattr(verdict, "stdout", b"") or b""
    return runner.read_runs(stdout, job)


def baseline(name: str, execute: Executor) -> Baseline:
    """Run the original suite twice (coverage first); RuntimeError when nothing passes."""
    tree = source_tree(name)
    args = deselect_args(PINS[name])
    sources = sorted(p for p in tree if is_source_path(p))
    runs = [runner.run_spec(tree, coverage=sources, output="discard", args=args),
            runner.run_spec(tree, output="discard", args=args)]
    covered, plain = _run(execute, tree, runs, 600.0)
    passing = covered.passed & plain.passed
    if not passing or plain.error:
        raise RuntimeError(f"{name}: the original suite does not pass in the sandbox: {plain.error or 'nothing passed'}")
    return Baseline(frozenset(passing), plain.collected, covered.coverage or {}, max(plain.wall_s, 0.1))


def candidates(name: str, base: Baseline, seed: int) -> list[tuple[str, mutate.Mutation]]:
    """Mutations on executed lines, in a seeded order that takes the files in turn and, within a
    file, the kinds in turn (so that bugs spread over files and kinds)."""
    tree = source_tree(name)
    rng = random.Random(f"{name}:{PINS[name].version}:{seed}")
    per_file = []
    for path in sorted(base.coverage):
        by_kind: dict[str, list[tuple[str, mutate.Mutation]]] = {}
        for m in mutate.mutations(tree[path], frozenset(base.coverage[path])):
            by_kind.setdefault(m.kind, []).append((path, m))
        queues = []
        for kind in mutate.KINDS:
            found = by_kind.get(kind, [])
            rng.shuffle(found)
            queues.append(found)
        per_file.append(_take_turns(queues))
    rng.shuffle(per_file)
    return _take_turns(per_file)


def _take_turns(queues: list[list]) -> list:
    """One item of each queue in turn, until all are empty."""
    queues = [list(q) for q in queues]
    order = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop())
    return order


def judge(results: runner.Results, base: Baseline, max_f2p: int) -> list[str] | None:
    """The fail-to-pass tests of a mutant run, or None when it is not kept."""
    if results.error or results.collected != base.collected:
        return None
    f2p = sorted(base.passing & set(results.failed))
    if not f2p or len(f2p) > max_f2p or any(results.failed[t] == runner.NO_RESULT for t in f2p):
        return None
    if base.passing - results.passed - set(f2p):  # a passing test neither passed nor failed: not kept
        return None
    return f2p


def _mutant(tree: dict[str, str], path: str, m: mutate.Mutation) -> tuple[dict[str, str], dict[str, Any]] | None:
    text = mutate.apply(tree[path], m)
    try:
        compile(text, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    return {path: text}, {"file": path, "line": m.line, "kind": m.kind, "original": m.original, "replacement": m.replacement}


def run_mutants(name: str, execute: Executor, base: Baseline, config: BuildConfig, wanted: int,
                progress: Progress | None = None) -> tuple[list[Kept], int]:
    """Try candidates in order, ``config.parallel`` jobs at a time, until ``wanted`` are kept,
    ``config.max_mutants`` were tried or :data:`DRY_WAVES` waves in a row kept none. Returns the kept mutants (in candidate order) and how many
    were tried."""
    tree = source_tree(name)
    args = deselect_args(PINS[name])
    timeout = run_limit(base)
    order = [(i, path, m) for i, (path, m) in enumerate(candidates(name, base, config.seed)[:config.max_mutants])]
    kept: list[Kept] = []
    tried = dry = 0
    with ThreadPoolExecutor(max_workers=config.parallel) as pool:
        while tried < len(order) and len(kept) < wanted and dry < DRY_WAVES:
            before = len(kept)
            # about twice as many mutants as are still wanted (about half are kept), in smaller jobs near the end
            size = max(4, min(config.batch, wanted - len(kept)))
            wave = [order[tried + k * size: tried + (k + 1) * size] for k in range(config.parallel)]
            wave = [b for b in wave if b]
            tried += sum(len(b) for b in wave)
            for batch, results in zip(wave, pool.map(lambda b: _run_batch(execute, tree, b, timeout, args, config), wave)):
                kept.extend(_keep(tree, batch, results, base, config))
            dry = dry + 1 if len(kept) == before else 0
            if progress:
                progress("mutants", min(len(kept), wanted), wanted)
    kept.sort(key=lambda k: k.index)
    return kept, tried


def _run_batch(execute: Executor, tree: dict[str, str], batch: list, timeout: float, args: list[str],
               config: BuildConfig) -> list[runner.Results | None]:
    runs, slots = [], []
    for _i, path, m in batch:
        made = _mutant(tree, path, m)
        slots.append(made)
        if made:
            runs.append(runner.run_spec(tree, files=made[0], timeout_s=timeout, output="discard",
                                        memory_mb=config.child_memory_mb, args=args))
    results = iter(_run(execute, tree, runs, timeout) if runs else [])
    return [next(results) if made else None for made in slots]


def _keep(tree: dict[str, str], batch: list, results: list[runner.Results | None], base: Baseline,
          config: BuildConfig) -> list[Kept]:
    out = []
    for (i, path, m), res in zip(batch, results):
        f2p = judge(res, base, config.max_f2p) if res is not None else None
        if f2p:
            files, record = _mutant(tree, path, m)
            out.append(Kept(i, files, [record], f2p, {t: res.failed[t] for t in f2p}))
    return out


def _lines_of(kept: Kept, tree: dict[str, str]) -> list[str]:
    """The original and mutated source lines of a mutant (never quoted in a prompt)."""
    out = []
    for record in kept.mutations:
        path, line = record["file"], record["line"]
        for text in (tree[path], kept.files[path]):
            rows = text.splitlines()
            out.extend(rows[line - 1:line + record["original"].count("\n")])
    return out


def pair_up(kept: list[Kept], wanted: int) -> list[tuple[Kept, Kept]]:
    """Up to ``wanted`` pairs of kept mutants in two different files, each mutant used once,
    taken in order (first with the next one in another file)."""
    pairs: list[tuple[Kept, Kept]] = []
    free = list(kept)
    while free and len(pairs) < wanted:
        a = free.pop(0)
        b = next((k for k in free if next(iter(k.files)) != next(iter(a.files))), None)
        if b is None:
            continue
        free.remove(b)
        pairs.append((a, b))
    return pairs


def run_pairs(name: str, execute: Executor, base: Baseline, pairs: list[tuple[Kept, Kept]],
              config: BuildConfig) -> list[tuple[Kept, Kept, list[str], dict[str, str]]]:
    """Each pair run together; kept when the run passes :func:`judge` (twice the tests allowed)
    and each of its two bugs still breaks a test of its own."""
    if not pairs:
        return []
    tree = source_tree(name)
    timeout = run_limit(base)
    runs = [runner.run_spec(tree, files={**a.files, **b.files}, timeout_s=timeout, output="discard",
                            memory_mb=config.child_memory_mb, args=deselect_args(PINS[name])) for a, b in pairs]
    chunks = [list(range(i, min(i + config.batch, len(runs)))) for i in range(0, len(runs), config.batch)]
    with ThreadPoolExecutor(max_workers=config.parallel) as pool:
        parts = list(pool.map(lambda idx: _run(execute, tree, [runs[i] for i in idx], timeout), chunks))
    results = [r for part in parts for r in part]
    out = []
    for (a, b), res in zip(pairs, results):
        f2p = judge(res, base, 2 * config.max_f2p)
        if f2p and set(a.f2p) & set(f2p) and set(b.f2p) & set(f2p):
            out.append((a, b, f2p, {t: res.failed[t] for t in f2p}))
    return out


def _task(name: str, level: int, n: int, tree: dict[str, str], bugs: list[Kept], f2p: list[str],
          failed: dict[str, str], seed: int) -> dict[str, Any]:
    pin = PINS[name]
    changed = {path: text for bug in bugs for path, text in bug.files.items()}
    def failure(t: str) -> issues.Failure:
        return issues.Failure(t, failed[t], issues.test_source(tree, t))
    per_bug = [[failure(t) for t in f2p if t in bug.f2p] for bug in bugs] if len(bugs) > 1 else [[failure(t) for t in f2p]]
    forbidden = [line for bug in bugs for line in _lines_of(bug, tree)]
    prompt = issues.issue(name, pin.version, level, per_bug, files=sorted(changed), seed=seed * 1000 + n,
                          forbidden=forbidden)
    return {"id": f"{name}-{level}-{n}", "level": level, "files": sorted(changed),
            "diff": tree_diff({p: tree[p] for p in changed}, changed), "f2p": list(f2p), "prompt": prompt,
            "mutations": [{k: v for k, v in r.items()} for bug in bugs for r in bug.mutations]}


def assemble(name: str, base: Baseline, singles: list[Kept], pairs: list[tuple[Kept, Kept, list[str], dict[str, str]]],
             config: BuildConfig) -> dict[str, Any]:
    """The package's task set: kept pairs as level 3, the other kept mutants alternately as
    levels 1 and 2 (up to what the config wants of each)."""
    tree = source_tree(name)
    pin = PINS[name]
    pairs = pairs[:config.level3]
    paired = {id(k) for a, b, _, _ in pairs for k in (a, b)}
    rest = [k for k in singles if id(k) not in paired]
    tasks = []
    counts = {1: 0, 2: 0}
    for k in rest:
        level = 1 if counts[1] <= counts[2] and counts[1] < config.level1 else 2
        if counts[level] >= (config.level1 if level == 1 else config.level2):
            continue
        tasks.append(_task(name, level, counts[level], tree, [k], k.f2p, k.failures, config.seed))
        counts[level] += 1
    for n, (a, b, f2p, failed) in enumerate(pairs):
        tasks.append(_task(name, 3, n, tree, [a, b], f2p, failed, config.seed))
    return {"package": name, "version": pin.version, "sha256": pin.sha256, "seed": config.seed,
            "deselected": list(pin.deselect), "passing": sorted(base.passing), "tasks": tasks}


def build_package(name: str, execute: Executor, config: BuildConfig = BuildConfig(),
                  progress: Progress | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build one package's task set: ``(document, figures)``; figures are the build's own
    (seconds, mutants tried and kept, tasks per level), not part of the reproducible document."""
    began = time.monotonic()
    base = baseline(name, execute)
    files = {path for path in base.coverage if base.coverage[path]}
    level3 = config.level3 if len(files) > 1 else 0
    if level3 == 0:  # a one-file package: its share of level 3 goes to levels 1 and 2
        config = BuildConfig(**{**config.__dict__, "level1": config.level1 + config.level3 // 2 + 2,
                                "level2": config.level2 + config.level3 // 2 + 2, "level3": 0})
    wanted = config.level1 + config.level2 + 2 * level3 + level3 // 2
    singles, tried = run_mutants(name, execute, base, config, wanted, progress)
    # pairs from the last kept mutants first: levels 1 and 2 take the first ones
    pairs = run_pairs(name, execute, base, pair_up(singles[::-1], level3 + level3 // 3 + 1) if level3 else [], config)
    doc = assemble(name, base, singles, pairs, config)
    levels = {str(level): sum(1 for t in doc["tasks"] if t["level"] == level) for level in (1, 2, 3)}
    figures = {"package": name, "seconds": round(time.monotonic() - began, 1), "tried": tried, "kept": len(singles),
               "pairs_kept": len(pairs), "tasks": len(doc["tasks"]), "levels": levels, "passing": len(base.passing),
               "suite_s": base.run_s, "covered_files": len(files)}
    return doc, figures


def encode(doc: dict[str, Any]) -> bytes:
    """A task set as gzip'd JSON, byte-for-byte the same for the same document."""
    raw = json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as f:
        f.write(raw)
    return buf.getvalue()


def write_tasks(doc: dict[str, Any], directory: Path = TASKS_DIR) -> Path:
    """Write ``<directory>/<package>.json.gz`` (atomically)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{doc['package']}.json.gz"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(encode(doc))
    tmp.replace(path)
    return path
