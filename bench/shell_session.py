"""What a shell session costs: a turn against the same command run bare, and a session's opening.

    python bench/shell_session.py [--n 40] [--backends bwrap,docker]

Per backend, interleaved round-robin with the bare runs so that machine load hits all alike:
`bare` is `bash --noprofile --norc -c 'cd /tmp && echo x'` run by subprocess on the host (no
isolation, no state); a turn is the same command in an open session (the state file read and
written, the agent's frames, the host's budgets); `open` is `open_session` + `close` with a
one-file tree and a `git init` setup (the setup is most of it). Last line: JSON with
bare_p50_ms and, per backend, <name>_turn_p50_ms, <name>_turn_ratio (turn p50 / bare p50),
<name>_open_p50_ms (null where the backend is unavailable).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.sandbox import SandboxError, close_runtimes, open_session  # noqa: E402

COMMAND = "cd /tmp && echo x"


def ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/shell_session.py")
    parser.add_argument("--n", type=int, default=40, help="turns (and bare runs) per backend")
    parser.add_argument("--backends", default="bwrap,docker", help="comma-separated backends")
    args = parser.parse_args(argv)
    bare: list[float] = []
    result: dict[str, float | None] = {}
    for name in args.backends.split(","):
        try:
            sessions = [open_session({"a.py": "print(1)\n"}, setup="git init -q", backend=name, domain="bench-shell")]
        except SandboxError as e:
            print(f"{name}: unavailable ({e})", file=sys.stderr)
            result.update({f"{name}_turn_p50_ms": None, f"{name}_turn_ratio": None, f"{name}_open_p50_ms": None})
            continue
        turns: list[float] = []
        with sessions[0] as sh:
            for _ in range(args.n):
                bare.append(ms(lambda: subprocess.run(["bash", "--noprofile", "--norc", "-c", COMMAND], check=True,
                                                      stdout=subprocess.DEVNULL)))
                turns.append(ms(lambda: sh.run(COMMAND)))
        opens = [ms(lambda: open_session({"a.py": "print(1)\n"}, setup="git init -q", backend=name,
                                         domain="bench-shell").close()) for _ in range(max(3, args.n // 8))]
        result[f"{name}_turn_p50_ms"] = round(statistics.median(turns), 2)
        result[f"{name}_open_p50_ms"] = round(statistics.median(opens), 2)
    bare_p50 = statistics.median(bare) if bare else None
    for name in args.backends.split(","):
        turn = result.get(f"{name}_turn_p50_ms")
        result[f"{name}_turn_ratio"] = round(turn / bare_p50, 2) if turn and bare_p50 else None
    close_runtimes()
    print(json.dumps({"bare_p50_ms": round(bare_p50, 2) if bare_p50 else None, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
