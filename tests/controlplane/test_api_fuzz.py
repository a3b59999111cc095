"""bench/api_fuzz.py in CI, at a small example count: schemathesis and the hostile pass (deep
nesting, bodies over the limit, NaN, NUL, lone surrogates, path-like strings in every string
field) find no server error and no answer that breaks the OpenAPI document."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_api_fuzz_finds_no_server_error_and_no_schema_violation():
    # DATABASE_URL (PostgreSQL in CI, where a NUL or a lone surrogate would fail a save) is where
    # the fuzzer creates and drops its own throwaway database.
    done = subprocess.run([sys.executable, "bench/api_fuzz.py", "--examples", "2"], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=1700)
    tail = done.stdout[-6000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["server_errors"] == 0, tail
    assert result["schema_violations"] == 0, tail
    assert result["late_refusals"] == 0, tail
    assert done.returncode == 0, tail
    # It did fuzz: every operation, and the hostile pass reached bodies, limits and uploads.
    assert result["operations"] >= 60 and result["test_cases"] > 1000, result
    assert result["hostile_requests"] > 1000 and result["hostile_statuses"].get("422", 0) > 500, result
    assert result["oversize_upload"]["status"] == 413, result
    assert set(a.rsplit(": ", 1)[1] for a in result["declared_200mb_answers"]) <= {"401", "413"}, result
