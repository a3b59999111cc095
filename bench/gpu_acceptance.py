"""A real Temper run on CUDA with vLLM: the acceptance figures of a GPU machine (bench/gpu_acceptance.sh).

Builds a Qwen2-0.5B-shaped Llama (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, tied
embeddings, vocab 151,936: about 494M parameters; its tokenizer is Temper's one-token-a-character
tokenizer padded to that vocabulary), then runs Temper's trainer on it (``trainer.job.Job``: vLLM
generation, in-process verification, the GRPO update, the weight sync to vLLM after every update)
for ``--steps`` steps on ``builtin-addition`` with long completions (a random model rarely stops).
The reward is synthetic (every other completion of a group passes) so that every group has an
advantage and every step updates on the whole batch: this measures the machine, not learning.
With ``--ranks N`` it starts itself under torchrun, one rank per GPU: rank 0 leads, the others
follow (trainer/ranks.py), and the update runs under DeepSpeed ZeRO-``--zero``.

Without CUDA (``--smoke``, or no GPU) the same path runs on the tiny model with the torch engine
on CPU, flagged ``"device": "cpu"`` and MFU null: it checks the script, not the machine.

Last line: one JSON object: device, ranks, zero, params, steps_per_s, gen_tokens_per_s,
train_tokens_per_s, mfu, weight_sync_s, mismatch_kl_max (medians over the steps after the first).

    python bench/gpu_acceptance.py [--steps 8] [--ranks 1] [--zero 0] [--prompts 64] [--n 8] [--new-tokens 256]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_step import peak_flops  # noqa: E402  (bench/ is on the path above)

QWEN2_05B = {"vocab_size": 151_936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 4096,
             "tie_word_embeddings": True}


def build_model(path: str, cuda: bool) -> int:
    """Save the model and its tokenizer under ``path``; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.models.tiny import CHARS, build_tiny, char_tokenizer

    if not cuda:
        build_tiny(path, layers=2)
        return sum(p.numel() for p in LlamaForCausalLM.from_pretrained(path).parameters())
    # One token per character, padded with characters of their own to Qwen2's vocabulary.
    filler = "".join(chr(0x30000 + i) for i in range(QWEN2_05B["vocab_size"]))
    tok = char_tokenizer(CHARS)
    tok = char_tokenizer(CHARS + filler[: QWEN2_05B["vocab_size"] - len(tok)])
    config = LlamaConfig(**QWEN2_05B, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.bos_token_id, torch_dtype="bfloat16")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def alternate(items):
    """Every other completion passes: each group's rewards differ, so the whole batch trains."""
    from trainer.outcomes import Verification

    return [Verification.passed() if i % 2 else Verification.failed() for i, _ in enumerate(items)]


def run_config(path: str, args, cuda: bool, world: int) -> dict:
    cfg = {
        "model": {"path": path, "dtype": "bfloat16" if cuda else "float32"},
        "seed": 0, "domains": {"builtin-addition": 1.0},
        "rollout": {"engine": "vllm" if cuda else "torch", "prompts_per_step": args.prompts, "n": args.n,
                    "max_new_tokens": args.new_tokens, "temperature": 1.0},
        "optimizer": {"lr": 1e-5, "micro_batch_size": args.micro_batch},
        "limits": {"max_steps": args.steps},
        "parallel": {"ranks": world},
    }
    if cuda:
        cfg["rollout"]["gpu_memory_utilization"] = args.gpu_memory
    if args.zero:
        cfg["optimizer"].update({"backend": "deepspeed", "zero_stage": args.zero})
    return cfg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=1, help="processes, one per GPU (torchrun)")
    parser.add_argument("--zero", type=int, default=0, choices=[0, 2, 3])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--gpu-memory", type=float, default=0.3, help="vLLM's share of each GPU")
    parser.add_argument("--smoke", action="store_true", help="the CPU path even where CUDA is present")
    parser.add_argument("--model", default="", help="a model directory built by an earlier call (ranks share it)")
    args = parser.parse_args()

    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda:
        torch.set_num_threads(1)
        args.prompts, args.n, args.new_tokens, args.micro_batch = min(args.prompts, 8), min(args.n, 4), min(args.new_tokens, 8), 8
    tmp = tempfile.mkdtemp(prefix="temper-gpu-acceptance-")
    if not args.model:
        args.model = os.path.join(tmp, "model")
        params = build_model(args.model, cuda)
    else:
        from transformers import AutoConfig, LlamaForCausalLM

        with torch.device("meta"):
            params = sum(p.numel() for p in LlamaForCausalLM(AutoConfig.from_pretrained(args.model)).parameters())
    if args.ranks > 1 and "LOCAL_RANK" not in os.environ:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc-per-node", str(args.ranks), os.path.abspath(__file__), *sys.argv[1:], "--model", args.model]
        os.execv(cmd[0], cmd)

    from trainer.follower import follow
    from trainer.job import Job

    world = 1
    if "LOCAL_RANK" in os.environ:
        from trainer import ranks

        rank, world = ranks.init_from_env()
        if rank > 0:
            follow()
            return 0
    job = Job(run_config(args.model, args, cuda, world), verify_batch=alternate)
    rows = []
    began = time.perf_counter()
    try:
        while job.step_count < args.steps:
            m = job.step()
            rows.append(m)
            print(f"step {job.step_count}: {m['stage/step_s']:.2f} s, generation {m.get('perf/gen_tokens_per_s', 0):.0f} tok/s, "
                  f"sync {m.get('stage/sync_s', 0):.2f} s, mismatch/kl {m.get('mismatch/kl', float('nan')):.2e}", flush=True)
    finally:
        job.close()
        if world > 1:  # the followers stop and the group closes, as a run's ranks do
            import torch.distributed as dist

            from trainer import ranks

            ranks.teardown()
            dist.destroy_process_group()
    after = rows[1:] or rows

    def median(key: str) -> float | None:
        values = [r[key] for r in after if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    # The leader's metrics are the whole step's: every rank's generation, the whole batch's update.
    trained = [r["perf/train_tokens"] / r["stage/update_s"] for r in after if r.get("perf/train_tokens") and r.get("stage/update_s")]
    if not trained:
        raise SystemExit("no step updated the policy (every group's rewards were equal)")
    train_tps = statistics.median(trained)
    peak = peak_flops(torch.cuda.get_device_name(0)) if cuda else None
    kl = [r["mismatch/kl"] for r in after if isinstance(r.get("mismatch/kl"), (int, float))]
    print(json.dumps({
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "ranks": world, "zero": args.zero, "params": params,
        "engine": "vllm" if cuda else "torch", "steps": args.steps,
        "steps_per_s": round(1 / median("stage/step_s"), 4),
        "gen_tokens_per_s": round(median("perf/gen_tokens_per_s"), 1),
        "train_tokens_per_s": round(train_tps, 1),
        "mfu": None if peak is None else round(6 * params * train_tps / (peak * world), 4),
        "weight_sync_s": None if median("stage/sync_s") is None else round(median("stage/sync_s"), 3),
        "mismatch_kl_max": max(kl) if kl else None, "wall_s": round(time.perf_counter() - began, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
