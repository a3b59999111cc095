"""The command line the sandbox's set-up modules share (``python -m workers.sandbox.image`` and
``python -m workers.sandbox.libs``): one subcommand that makes a thing unless it is there
(``--force``: again anyway), and ``status``, which prints whether it is there."""
from __future__ import annotations

import argparse
from typing import Any, Callable


def make_or_status(
    argv: list[str] | None,
    *,
    prog: str,
    verb: str,
    verb_help: str,
    force_help: str | None,
    make: Callable[..., Any],
    status_help: str,
    present: Callable[[], bool],
    label: str,
    words: tuple[str, str],
) -> int:
    """Run ``prog verb [--force]`` (``make(force=...)``, status 0) or ``prog status``, which prints
    ``label: words[0]`` when ``present()`` and ``label: words[1]`` otherwise (status 0 or 1)."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser(verb, help=verb_help).add_argument("--force", action="store_true", help=force_help)
    sub.add_parser("status", help=status_help)
    args = parser.parse_args(argv)
    if args.cmd == verb:
        make(force=args.force)
        return 0
    ok = present()
    print(f"{label}: {words[0] if ok else words[1]}")
    return 0 if ok else 1
