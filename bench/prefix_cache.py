"""vLLM prefix caching for GRPO groups: the time to generate ``--n`` samples for each of
``--prompts`` long prompts, with the prefix cache on (the default, ``rollout.prefix_caching``) and
off, each in a fresh process with its own engine, through the trainer's own VLLMEngine.

    .venv/bin/python bench/prefix_cache.py     # last line: {"on_s", "off_s", "speedup", ...}

The model is a tiny Llama built on the spot (hidden 256, 4 layers, 2,048 positions); on CPU the
engine reserves ``--memory`` of RAM for its KV cache. Each mode runs a warm-up call first, then
``--rounds`` timed calls of the whole batch, with a weight sync (which empties the cache) before
each, as training does between steps: the saving is within a step's groups, never across steps.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(args) -> dict:
    """One mode in this process: seconds per round of generation."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.config import ModelConfig, TokenizerConfig
    from trainer.models.load import load_tokenizer
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.vllm_engine import VLLMEngine

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(ModelConfig(path=args.model), TokenizerConfig())
    engine = VLLMEngine(model, tokenizer, path=args.model, max_model_len=args.prompt_tokens + args.new_tokens,
                        gpu_memory_utilization=args.memory, prefix_caching=args.mode == "on")
    rng = random.Random(0)
    prompts = [[rng.randrange(3, len(tokenizer)) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)]
    batch = [p for p in prompts for _ in range(args.n)]  # groups: n samples of each prompt, side by side
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, ignore_eos=True)
    engine.generate(batch[: args.n], params)  # warm-up
    rounds = []
    for _ in range(args.rounds):
        engine.sync_weights(model)  # as after an update: the cache starts empty
        t0 = time.perf_counter()
        gens = engine.generate(batch, params)
        rounds.append(time.perf_counter() - t0)
        assert all(len(g.token_ids) == args.new_tokens for g in gens)
    engine.close()
    return {"mode": args.mode, "round_s": rounds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (the GRPO group)")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", type=float, default=0.1, help="share of RAM for the KV cache (CPU)")
    parser.add_argument("--mode", choices=["on", "off"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # a child: one mode, one JSON line
        print(json.dumps(measure(args)))
        return 0

    from trainer.models.tiny import build_tiny

    with tempfile.TemporaryDirectory(prefix="temper-prefix-") as tmp:
        model = build_tiny(Path(tmp) / "model", hidden=256, layers=4, heads=4, intermediate=1024,
                           max_positions=args.prompt_tokens + args.new_tokens)
        results = {}
        for mode in ("off", "on"):
            cmd = [sys.executable, __file__, "--mode", mode, "--model", str(model)] + [
                f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("mode", "model")]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return out.returncode
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])["round_s"]
            print(f"prefix caching {mode}: rounds {[round(s, 2) for s in results[mode]]} s", file=sys.stderr)
    off, on = min(results["off"]), min(results["on"])
    new_tokens = args.prompts * args.n * args.new_tokens
    print(json.dumps({
        "prompts": args.prompts, "n": args.n, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "off_s": round(off, 3), "on_s": round(on, 3), "speedup": round(off / on, 2),
        "gen_tokens_per_s_off": round(new_tokens / off, 1), "gen_tokens_per_s_on": round(new_tokens / on, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
