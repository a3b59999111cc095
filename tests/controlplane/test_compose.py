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


def _spec() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


ONE_SHOT = {"migrate"}
"""Services that run once and exit: no health check; the others wait for their exit status 0."""
SANDBOXED = {"worker-verify", "worker-verify-long", "worker-eval", "worker-audit"}
"""Workers whose tasks run candidate code in bubblewrap sandboxes."""


def test_every_long_running_service_has_a_health_check():
    for name, svc in _spec()["services"].items():
        if name in ONE_SHOT:
            assert "healthcheck" not in svc and svc["restart"] == "no"
            continue
        test = svc.get("healthcheck", {}).get("test")
        assert test, f"{name} has no health check"
        cmd = svc.get("command", [])
        if cmd[:4] == ["celery", "-A", "workers.celery", "worker"]:
            # the ping goes to this worker's own node name (-n NAME@%h)
            node = cmd[cmd.index("-n") + 1]
            assert node.endswith("@%h") and test == ["CMD", "python", "deploy/healthcheck.py", "worker", node[:-3]], name
    assert _spec()["services"]["web"]["healthcheck"]["test"][-1] == "web"
    assert _spec()["services"]["beat"]["healthcheck"]["test"][-1] == "beat"


def test_app_services_start_after_migrate_succeeded():
    for name, svc in _spec()["services"].items():
        if name in ONE_SHOT or name in ("postgres", "redis"):
            continue
        assert svc["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
        assert svc["depends_on"]["postgres"] == {"condition": "service_healthy"}, name
    assert _spec()["services"]["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_sandbox_workers_get_the_documented_privilege_and_no_more():
    for name, svc in _spec()["services"].items():
        assert not svc.get("privileged"), name
        assert "/var/run/docker.sock" not in str(svc.get("volumes", [])), name
        if name in SANDBOXED:
            assert svc["user"] == "root" and svc["cap_add"] == ["SYS_ADMIN"], name
            assert sorted(svc["security_opt"]) == ["apparmor=unconfined", "seccomp=unconfined"], name
        else:
            assert "cap_add" not in svc and "security_opt" not in svc and "user" not in svc, name


def test_gpu_profile_requests_nvidia_gpus():
    gpu = {name: svc for name, svc in _spec()["services"].items() if "gpu" in svc.get("profiles", [])}
    assert set(gpu) == {"worker-train-gpu", "worker-rollout-gpu"}
    for svc in gpu.values():
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        assert svc["build"]["args"]["REQUIREMENTS"] == "requirements/lock/gpu.txt"
    tool = shutil.which("docker-compose")
    require(tool is not None, "Debian's docker-compose 1.29 to validate the gpu profile")
    env = {**os.environ, "SECRET_KEY": "validate-only"}
    result = subprocess.run([tool, "--profile", "gpu", "config", "--services"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert set(gpu) <= set(result.stdout.split())


def test_readme_lists_exactly_the_services_of_the_file():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Production: `docker compose`", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
    assert listed == set(_spec()["services"])
