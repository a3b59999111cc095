"""The domain catalogue: importing this package registers every catalogue domain.

Families: every reasoning-gym generator (``rg-*``), HumanEval (``code-humaneval``), generated
math (``math-*``), document analysis over generated financial statements (``doc-*``) and
multi-step tool use (``tool-*``). The built-in addition/reversal/parity domains live in
``trainer.tasks.builtin``. JSONL uploads are parsed by :mod:`trainer.catalogue.jsonl`.
"""
from __future__ import annotations

from trainer.catalogue import documents, humaneval, math_gen, reasoning_gym_domains, tool_use

DOMAINS = [
    *reasoning_gym_domains.register_all(),
    *humaneval.register_all(),
    *math_gen.register_all(),
    *documents.register_all(),
    *tool_use.register_all(),
]
"""Every DomainSpec this package registered, in a stable order."""
