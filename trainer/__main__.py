"""Command line: ``python -m trainer run CONFIG.yaml`` runs a whole job with a progress bar.

    python -m trainer run run.yaml [--resume CKPT_DIR] [--metrics-jsonl FILE] [--no-progress]
    python -m trainer schema                 # the config's JSON Schema
    python -m trainer build-tiny DIR         # a tiny local Llama + char tokenizer
"""
from __future__ import annotations

import argparse
import json
import sys

from trainer.config import ConfigError, load_config
from trainer.config_schema import config_json_schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job from a YAML or JSON config")
    run.add_argument("config")
    run.add_argument("--resume", help="checkpoint directory to continue from")
    run.add_argument("--metrics-jsonl", help="append one JSON line of metrics per step here")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--threads", type=int, default=0,
                     help="torch CPU threads (0: torch's default; 1 is fastest on busy small machines)")
    sub.add_parser("schema", help="print the config JSON Schema")
    tiny = sub.add_parser("build-tiny", help="build the tiny local model")
    tiny.add_argument("path")
    args = parser.parse_args(argv)

    if args.command == "schema":
        print(json.dumps(config_json_schema(), indent=2))
        return 0
    if args.command == "build-tiny":
        # lazy: trainer.models.tiny and trainer.job import torch and transformers (seconds); the
        # other commands, and a config with errors, are answered without waiting for them.
        from trainer.models.tiny import build_tiny

        print(build_tiny(args.path))
        return 0

    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from trainer.job import Job  # lazy: torch and transformers, as build_tiny above

    callbacks = []
    if args.metrics_jsonl:
        sink = open(args.metrics_jsonl, "a", encoding="utf-8")

        def write(step: int, metrics: dict, samples: list) -> None:
            sink.write(json.dumps({"step": step, **metrics}) + "\n")
            sink.flush()

        callbacks.append(write)
    try:
        job = Job.resume(args.resume, callbacks) if args.resume else Job(config, callbacks)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    final = job.run(progress=not args.no_progress)
    summary = {k: round(v, 4) for k, v in final.items() if k.startswith(("reward/", "pass_rate/"))}
    print(json.dumps({"steps": job.step_count, **summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
