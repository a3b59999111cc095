"""The supervised stage: next-token loss on reference answers, before RL.

Real post-training starts RL from a supervised model; the demo and the benches use a short SFT
stage to make a weak "base model" from random init.
"""
from __future__ import annotations

import torch

from trainer.tasks.base import Task


def reference_text(task: Task) -> str:
    """The answer a task's SFT example ends with: ``meta['solution']`` or the string answer."""
    solution = task.meta.get("solution", task.answer)
    if not isinstance(solution, str):
        raise ValueError(f"task {task.domain}/{task.id} has no text solution for SFT")
    return solution


def sft_batch(tokenizer, tasks: list[Task], device) -> dict[str, torch.Tensor]:
    """input_ids (B, T) right-padded; labels (B, T) with -100 everywhere but answer and eos."""
    rows, labels = [], []
    for task in tasks:
        prompt = tokenizer(task.prompt)["input_ids"]
        answer = tokenizer(reference_text(task), add_special_tokens=False)["input_ids"]
        answer = answer + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), length), -100, dtype=torch.long)
    attn = torch.zeros((len(rows), length), dtype=torch.long)
    for i, (r, l) in enumerate(zip(rows, labels)):
        ids[i, :len(r)] = torch.tensor(r)
        lab[i, :len(l)] = torch.tensor(l)
        attn[i, :len(r)] = 1
    return {"input_ids": ids.to(device), "labels": lab.to(device), "attention_mask": attn.to(device)}


def sft_step(model, backend, tokenizer, tasks: list[Task], device) -> float:
    """One optimizer step of mean next-token cross-entropy on the answers; returns the loss."""
    batch = sft_batch(tokenizer, tasks, device)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]),  # (B*(T-1), V)
        batch["labels"][:, 1:].reshape(-1),  # (B*(T-1),)
        ignore_index=-100)
    backend.backward(loss)
    backend.step()
    return float(loss.detach())
