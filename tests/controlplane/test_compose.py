"""docker-compose.yml is the production topology: it validates, and every queue has a worker."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from controlplane.settings.celery import CELERY_QUEUES_ALL
from tests.services import require

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_validates():
    tool = shutil.which("docker-compose")
    compose = [tool] if tool else None
    if compose is None and shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        compose = ["docker", "compose"] if probe.returncode == 0 else None
    require(compose is not None, "docker compose (or Debian's docker-compose) to validate docker-compose.yml")
    env = {**os.environ, "SECRET_KEY": "validate-only"}
    result = subprocess.run([*compose, "config", "-q"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_topology_has_every_part():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"postgres", "redis", "web", "beat", "migrate"} <= set(services)
    served = set()
    for name, svc in services.items():
        cmd = svc.get("command", [])
        if cmd[:4] == ["celery", "-A", "workers.celery", "worker"]:
            served.update(cmd[cmd.index("-Q") + 1].split(","))
    assert served == set(CELERY_QUEUES_ALL)
    web = services["web"]["command"]
    # Several web processes on one port, as many as TEMPER_WEB_PROCESSES says (controlplane/web/serving.py).
    assert web[:2] == ["uvicorn", "controlplane.asgi:application"]
    assert web[web.index("--workers") + 1] == "${TEMPER_WEB_PROCESSES:-2}"
    from controlplane.web.serving import WS_MAX_BYTES
    assert web[web.index("--ws-max-size") + 1] == str(WS_MAX_BYTES)  # as the demo's server
