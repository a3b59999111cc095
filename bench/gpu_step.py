"""A few generation and training steps of a random-init ~0.5B model on a GPU.

Builds a Qwen2-0.5B-shaped Llama (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864,
vocab 151,936; about 494M parameters) from a config, generates with Temper's torch rollout
engine and trains with its optimizer backend (plain torch, or DeepSpeed ZeRO with ``--zero``).
Without CUDA it runs the same code on the tiny model on CPU, flagged ``"device": "cpu"`` (MFU is
then null: there is no meaningful peak to compare with).

With ``--ranks N`` it starts itself under ``torchrun --standalone --nproc-per-node N``: one rank
per GPU (NCCL; gloo on CPU), each generating its own batch and training data parallel (the plain
backend sums the gradients over the ranks, trainer/parallel.py; DeepSpeed's engine reduces its
own), and reports the ranks' total tokens over the slowest rank's seconds.

Last line: one JSON object with gen_tokens_per_s, train_tokens_per_s, mfu, device, params, ranks.

    python bench/gpu_step.py [--zero 0|2|3] [--ranks N] [--gen-batch 256] [--new-tokens 128] [--train-batch 16] [--seq 1024]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}


def peak_flops(name: str) -> float | None:
    for key, flops in PEAK_BF16_FLOPS.items():
        if key in name:
            return flops
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zero", type=int, default=0, choices=[0, 2, 3])
    parser.add_argument("--gen-batch", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=1, help="processes (one per GPU), started with torchrun")
    args = parser.parse_args()
    if args.ranks > 1 and "LOCAL_RANK" not in os.environ:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc-per-node", str(args.ranks), os.path.abspath(__file__), *sys.argv[1:]]
        os.execv(cmd[0], cmd)

    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.config import OptimizerConfig
    from trainer.models.tiny import char_tokenizer, tiny_llama_config
    from trainer.optim import make_backend
    from trainer.parallel import all_reduce_grads
    from trainer.ranks import broadcast_params, init_from_env
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.torch_engine import TorchEngine

    rank, world = init_from_env() if "LOCAL_RANK" in os.environ else (0, 1)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    tok = char_tokenizer()
    if cuda:
        config = LlamaConfig(vocab_size=151_936, hidden_size=896, intermediate_size=4864,
                             num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                             max_position_embeddings=4096, tie_word_embeddings=True,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                             bos_token_id=tok.bos_token_id)
        dtype = torch.bfloat16
    else:  # CPU fallback: the same code path on the tiny model, small shapes
        torch.set_num_threads(1)  # shared 2-core machines: more threads only spin
        config = tiny_llama_config(len(tok))
        dtype = torch.float32
        args.gen_batch, args.new_tokens = min(args.gen_batch, 64), min(args.new_tokens, 32)
        args.train_batch, args.seq = min(args.train_batch, 8), min(args.seq, 128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    if world > 1:
        broadcast_params(model)  # one model on every rank
        torch.manual_seed(1 + rank)  # each rank its own prompts and batch

    # generation: Temper's torch engine, KV cache, no stop token (fixed length)
    engine = TorchEngine(model, tok, seed=0, batch_size=args.gen_batch)
    sp = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0,
                        stop_token_ids=())
    prompts = torch.randint(10, config.vocab_size, (args.gen_batch, 32)).tolist()
    engine.generate(prompts[:8], SamplingParams(max_new_tokens=4))  # warm-up
    gen_tokens, gen_s = 0, 0.0
    for _ in range(2):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        gens = engine.generate(prompts, sp)
        if cuda:
            torch.cuda.synchronize()
        gen_s += time.perf_counter() - t0
        gen_tokens += sum(len(g.token_ids) for g in gens)

    # training: forward + backward + optimizer step on (B, T) random tokens
    model.train()
    backend = make_backend(model, OptimizerConfig(lr=1e-5, zero_stage=args.zero,
                                                  micro_batch_size=args.train_batch))
    model = backend.model
    batch = torch.randint(10, config.vocab_size, (args.train_batch, args.seq), device=device)
    train_s, train_tokens = 0.0, 0
    for step in range(args.steps + 1):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(input_ids=batch).logits  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 batch[:, 1:].reshape(-1))
        backend.backward(loss / world if world > 1 and args.zero == 0 else loss)
        if world > 1 and args.zero == 0:
            all_reduce_grads([p for p in model.parameters() if p.requires_grad])
        backend.step()
        if cuda:
            torch.cuda.synchronize()
        if step > 0:  # step 0 is warm-up
            train_s += time.perf_counter() - t0
            train_tokens += batch.numel()
    if world > 1:  # the ranks' tokens over the slowest rank's seconds
        sums = torch.tensor([gen_tokens, train_tokens], dtype=torch.float64)
        slowest = torch.tensor([gen_s, train_s], dtype=torch.float64)
        dist.all_reduce(sums)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        (gen_tokens, train_tokens), (gen_s, train_s) = sums.tolist(), slowest.tolist()
    gen_tps = gen_tokens / gen_s
    train_tps = train_tokens / train_s
    peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
    mfu = 6 * params * train_tps / (peak * world) if peak else None
    if rank != 0:
        dist.destroy_process_group()
        return
    print(json.dumps({"ranks": world, "backend": dist.get_backend() if world > 1 else None,"gen_tokens_per_s": round(gen_tps, 1), "train_tokens_per_s": round(train_tps, 1),
                      "mfu": None if mfu is None else round(mfu, 4),
                      "device": torch.cuda.get_device_name() if cuda else "cpu",
                      "params": params, "dtype": str(dtype).removeprefix("torch."),
                      "zero_stage": args.zero, "gen_batch": args.gen_batch,
                      "new_tokens": args.new_tokens, "train_batch": args.train_batch,
                      "seq": args.seq}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
