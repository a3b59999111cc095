"""bench/dispatch_mixed.py runs end to end (real workers on Redis, the real sandbox) and routes
the long verifications to the long lane only with lanes on. Its figures (short-task p95 with lanes
on and off) are measured by the bench itself, not asserted here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import require_redis

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.services]


@pytest.mark.timeout(600)
def test_the_mixed_dispatch_bench_routes_long_work_to_its_lane():
    url = require_redis()
    done = subprocess.run([sys.executable, "bench/dispatch_mixed.py", "--tasks", "24", "--rate", "8", "--long-share", "0.25"],
                          cwd=ROOT, env={**os.environ, "REDIS_URL": url}, capture_output=True, text=True, timeout=560)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    off, on = out["lanes_off"], out["lanes_on"]
    assert off["short"] + off["long"] == on["short"] + on["long"] == 24
    assert off["routed"] == {"short": 24, "long": 0}
    assert on["routed"]["long"] == on["long"] > 0  # every long one, measured in the warm-up, went to its lane
    assert on["routed"]["short"] == on["short"]
