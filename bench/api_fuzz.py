"""Fuzz the REST API against its own OpenAPI document with schemathesis.

Boots the site on a throwaway embedded database (or DATABASE_URL if given), seeds a team with a
token, a domain catalogue and runs, then lets schemathesis send at least --examples generated
requests per operation. It checks that no response is a server error and that every response
matches the documented schema. Last line: one JSON object.

    .venv/bin/python bench/api_fuzz.py --examples 100
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SEED = r"""
from controlplane.accounts.models import Membership, Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import token_create
from controlplane.runs.services import run_create, run_start
from django.contrib.auth import get_user_model
from django.core.management import call_command
call_command("domains", "sync", "--no-progress", verbosity=0)
User = get_user_model()
user = User.objects.create_user("fuzz", password="fuzz-pass-1", is_staff=True, is_superuser=True)
team = Team.objects.create(slug="fuzz", name="Fuzz")
Membership.objects.create(user=user, team=team, role="admin")
actor = Principal.for_user(user)
# Tokens the fuzzer may revoke without losing its own (created last, with the highest id).
for i in range(50):
    token_create(actor=actor, team=team, name=f"spare-{i}")
for i in range(3):
    run = run_create(actor=actor, data={"team": "fuzz", "name": f"run {i}", "base_model": "tiny",
        "domains": [{"slug": "builtin-addition", "weight": 1}], "budget": {"steps": 10}})
    if i:
        run_start(actor=actor, run=run)
_, secret = token_create(actor=Principal.for_user(user), team=team, name="fuzzer", role="admin")
print("TOKEN", secret)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="generated examples per operation (>= 100 for the goal)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="temper-fuzz-"))
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DJANGO_SETTINGS_MODULE", "REDIS_URL")}
    env["TEMPER_VAR_DIR"] = str(work / "var")
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    seeded = subprocess.run([py, "manage.py", "shell", "-c", SEED], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    token = re.search(r"TOKEN (\S+)", seeded.stdout).group(1)

    port = free_port()
    server = subprocess.Popen([py, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for raw in server.stdout:
        if b"Listening on TCP address" in raw:
            break
    else:
        print(json.dumps({"error": "daphne did not start"}))
        return 1
    # Keep reading the access log: a full pipe would block the server.
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    # Revoking tokens goes last, on its own: revoking the fuzzer's own token midway would turn
    # every later request into a 401 and hide the rest of the API from the fuzzer.
    passes = [["--exclude-operation-id", "controlplane_accounts_api_token_revoke"],
              ["--include-operation-id", "controlplane_accounts_api_token_revoke"]]
    totals = {"generated": 0, "passed": 0, "failed": 0, "operations": 0}
    outputs, codes = [], []
    try:
        for i, selection in enumerate(passes):
            cmd = [
                py, "-m", "schemathesis.cli", "run", f"{base}/api/openapi.json", *selection,
                "-H", f"Authorization: Bearer {token}",
                "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance",
                "--max-examples", str(args.examples), "--seed", str(args.seed),
                "--continue-on-failure", "--suppress-health-check", "all",
                "--report", "ndjson", "--report-ndjson-path", str(work / f"report-{i}.ndjson"),
            ]
            st = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            outputs.append(st.stdout)
            codes.append(st.returncode)
            tested = re.search(r"Tested: (\d+)", st.stdout)
            cases = re.search(r"(\d+) generated, (\d+) passed(?:, (\d+) failed)?", st.stdout)
            totals["operations"] += int(tested.group(1)) if tested else 0
            if cases:
                totals["generated"] += int(cases.group(1))
                totals["passed"] += int(cases.group(2))
                totals["failed"] += int(cases.group(3) or 0)
    finally:
        server.terminate()
        server.wait(timeout=30)
    wall = time.monotonic() - started
    for out in outputs:
        print("\n".join(out.strip().splitlines()[-30:]))
    failures = sum(len(re.findall(r"Server error|Response violates schema|Undocumented Content-Type", out)) for out in outputs)
    result = {
        "operations": totals["operations"],
        "examples_per_operation": args.examples,
        "test_cases": totals["generated"],
        "passed": totals["passed"],
        "failed": totals["failed"],
        "server_errors_or_schema_violations": failures,
        "schemathesis_exit": max(codes) if codes else None,
        "wall_s": round(wall, 1),
    }
    print(json.dumps(result))
    return 0 if codes and max(codes) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
