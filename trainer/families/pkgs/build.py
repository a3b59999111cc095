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
   mutants in two different files that are likely to interact (they break a common test, or one's
   file names the other's function) are run together, and a pair is kept by the same rule when its
   bugs interact (a test fails with either alone and with both, fails only with both, or one
   bug masks the other's failure): those become level-3 tasks;
5. each task's prompt is an issue written from its failing tests (:mod:`trainer.families.pkgs.issues`).

The result is deterministic for a pin and a seed (the order of the work does not depend on which
job finishes first) and is written as ``tasks/<name>.json.gz``.
"""
from __future__ import annotations

import gzip
import io
import ast
import json
import random
import re
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


@dataclass(frozen=True)
class Pair:
    """Two kept mutants in two files, run together, whose bugs interact."""

    a: Kept
    b: Kept
    f2p: list[str]
    """Tests that passed on the original and fail with both bugs."""
    failures: dict[str, str]
    """f2p test -> pytest's message (with both bugs)."""
    interaction: dict[str, list[str]]
    """:func:`interaction` of the run."""


def _function_at(text: str, line: int) -> tuple[str, str] | None:
    """Name and source of the innermost function whose body holds ``line``, or None."""
    best = None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno >= best.lineno:
                best = node
    return (best.name, ast.get_source_segment(text, best) or "") if best else None


def _bug_function(bug: Kept, tree: dict[str, str]) -> tuple[str, str] | None:
    record = bug.mutations[0]
    return _function_at(tree[record["file"]], record["line"])


def linked(a: Kept, b: Kept, tree: dict[str, str], functions: dict[int, tuple[str, str] | None] | None = None) -> bool:
    """Whether one bug's file names the other bug's function (it calls or imports it): a static
    hint that the two bugs may lie on one path, tried after the pairs that share a failing test
    (whether they interact is then measured). ``functions``: each bug's function (name, source)
    by its index, when already found."""
    fa = functions[a.index] if functions is not None else _bug_function(a, tree)
    fb = functions[b.index] if functions is not None else _bug_function(b, tree)
    if not fa or not fb:
        return False
    return re.search(rf"\b{re.escape(fb[0])}\b", tree[a.mutations[0]["file"]]) is not None or \
        re.search(rf"\b{re.escape(fa[0])}\b", tree[b.mutations[0]["file"]]) is not None


def pair_candidates(kept: list[Kept], tree: dict[str, str], wanted: int, max_uses: int = 2) -> list[tuple[Kept, Kept]]:
    """Up to ``wanted`` pairs of kept mutants in two different files likely to interact, each
    mutant in at most ``max_uses`` pairs: first the pairs whose bugs already break a common test
    (most shared tests first), then pairs where one bug's file names the other's function; in candidate order
    within each."""
    functions = {k.index: _bug_function(k, tree) for k in kept}
    ranked = []
    for i, a in enumerate(kept):
        for b in kept[i + 1:]:
            if next(iter(a.files)) == next(iter(b.files)):
                continue
            shared = len(set(a.f2p) & set(b.f2p))
            if shared or linked(a, b, tree, functions):
                ranked.append((0 if shared else 1, -shared, a.index, b.index, a, b))
    ranked.sort(key=lambda r: r[:4])
    uses: dict[int, int] = {}
    pairs: list[tuple[Kept, Kept]] = []
    for *_, a, b in ranked:
        if len(pairs) >= wanted:
            break
        if uses.get(a.index, 0) < max_uses and uses.get(b.index, 0) < max_uses:
            pairs.append((a, b))
            uses[a.index] = uses.get(a.index, 0) + 1
            uses[b.index] = uses.get(b.index, 0) + 1
    return pairs


def interaction(a: Kept, b: Kept, f2p: list[str]) -> dict[str, list[str]]:
    """How two bugs run together interact, from their fail-to-pass tests alone and together:
    ``shared`` fail with either bug alone and with both (neither fix alone makes them pass);
    ``together`` fail only with both bugs; ``masked`` fail with one bug alone but pass with both
    (fixing one bug uncovers the other's failure). Empty lists: the bugs are independent.

    >>> k = lambda i, tests: Kept(i, {}, [], tests, {})
    >>> interaction(k(0, ["t1", "t2"]), k(1, ["t2", "t3"]), ["t1", "t2", "t4"])
    {'shared': ['t2'], 'together': ['t4'], 'masked': ['t3']}
    """
    both = set(f2p)
    alone_a, alone_b = set(a.f2p), set(b.f2p)
    return {"shared": sorted(alone_a & alone_b & both), "together": sorted(both - alone_a - alone_b),
            "masked": sorted((alone_a | alone_b) - both)}


def run_pairs(name: str, execute: Executor, base: Baseline, pairs: list[tuple[Kept, Kept]],
              config: BuildConfig) -> list[Pair]:
    """Each pair run together; kept when the run passes :func:`judge` (twice the tests allowed)
    and the bugs interact (:func:`interaction`: at least one test says so). Either bug alone
    breaks tests of its own, so a fix of one bug alone still fails the task."""
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
        if not f2p:
            continue
        how = interaction(a, b, f2p)
        if how["shared"] or how["together"] or how["masked"]:
            out.append(Pair(a, b, f2p, {t: res.failed[t] for t in f2p}, how))
    return out


def _task(name: str, level: int, n: int, tree: dict[str, str], bugs: list[Kept], f2p: list[str],
          failed: dict[str, str], seed: int, how: dict[str, list[str]] | None = None) -> dict[str, Any]:
    pin = PINS[name]
    changed = {path: text for bug in bugs for path, text in bug.files.items()}
    meet = set((how or {}).get("shared", [])) | set((how or {}).get("together", []))
    # where the bugs meet first: those failures are what the issue opens with
    ordered = sorted(f2p, key=lambda t: (t not in meet, f2p.index(t)))
    shown = [issues.Failure(t, failed[t], issues.test_source(tree, t)) for t in ordered]
    forbidden = [line for bug in bugs for line in _lines_of(bug, tree)]
    prompt = issues.issue(name, pin.version, level, [shown], files=sorted(changed), seed=seed * 1000 + n,
                          forbidden=forbidden)
    task = {"id": f"{name}-{level}-{n}", "level": level, "files": sorted(changed),
            "diff": tree_diff({p: tree[p] for p in changed}, changed), "f2p": list(f2p), "prompt": prompt,
            "mutations": [{k: v for k, v in r.items()} for bug in bugs for r in bug.mutations]}
    if how is not None:
        task["interaction"] = how
    return task


def assemble(name: str, base: Baseline, singles: list[Kept], pairs: list[Pair], config: BuildConfig) -> dict[str, Any]:
    """The package's task set: the first kept mutants alternately as levels 1 and 2 (up to what
    the config wants of each), interacting pairs as level 3 (a pair may reuse a level-1 or
    level-2 bug, as SWE-smith's combined tasks do)."""
    tree = source_tree(name)
    pin = PINS[name]
    tasks = []
    counts = {1: 0, 2: 0}
    for k in singles:
        level = 1 if counts[1] <= counts[2] and counts[1] < config.level1 else 2
        if counts[level] >= (config.level1 if level == 1 else config.level2):
            continue
        tasks.append(_task(name, level, counts[level], tree, [k], k.f2p, k.failures, config.seed))
        counts[level] += 1
    for n, pair in enumerate(pairs[:config.level3]):
        tasks.append(_task(name, 3, n, tree, [pair.a, pair.b], pair.f2p, pair.failures, config.seed, pair.interaction))
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
    # more kept mutants than levels 1 and 2 take: the more there are, the more pairs that interact
    wanted = config.level1 + config.level2 + 2 * level3
    singles, tried = run_mutants(name, execute, base, config, wanted, progress)
    tree = source_tree(name)
    candidates_ = pair_candidates(singles, tree, 3 * level3) if level3 else []
    pairs = run_pairs(name, execute, base, candidates_, config)
    doc = assemble(name, base, singles, pairs, config)
    levels = {str(level): sum(1 for t in doc["tasks"] if t["level"] == level) for level in (1, 2, 3)}
    figures = {"package": name, "seconds": round(time.monotonic() - began, 1), "tried": tried, "kept": len(singles),
               "pairs_tried": len(candidates_), "pairs_kept": len(pairs), "tasks": len(doc["tasks"]), "levels": levels, "passing": len(base.passing),
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
