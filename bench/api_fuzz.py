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
    report = work / "report.ndjson"
    started = time.monotonic()
    try:
        cmd = [
            py, "-m", "schemathesis.cli", "run", f"{base}/api/openapi.json",
            "-H", f"Authorization: Bearer {token}",
            "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance",
            "--max-examples", str(args.examples), "--seed", str(args.seed),
            "--continue-on-failure", "--suppress-health-check", "all",
            "--report", "ndjson", "--report-ndjson-path", str(report),
        ]
        st = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    wall = time.monotonic() - started
    tail = st.stdout.strip().splitlines()[-40:]
    print("\n".join(tail))
    failures = [line for line in st.stdout.splitlines() if re.search(r"Server error|Response violates schema|Undocumented Content-Type", line)]
    operations = len(re.findall(r'"operationId"', json.dumps(json.loads(
        subprocess.run([py, "manage.py", "shell", "-c",
                        "from controlplane.api import api; import json; print(json.dumps(api.get_openapi_schema()))"],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout))))
    summary = next((line for line in reversed(st.stdout.splitlines()) if re.search(r"\d+ (passed|failed)", line)), "")
    result = {
        "operations": operations,
        "examples_per_operation": args.examples,
        "schemathesis_exit": st.returncode,
        "failures": len(failures),
        "summary": summary.strip(" =\n"),
        "wall_s": round(wall, 1),
    }
    print(json.dumps(result))
    return 0 if st.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
