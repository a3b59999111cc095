"""The production stack, built and booted as README.md says, runs a code-domain run end to end.

Builds the image from the repository's Dockerfile through docker-compose.yml's build section
(base images made from Debian packages and a wheelhouse served from this machine: no registry is
reachable here, tests/deploy/images.py), boots the whole stack with docker-compose under a
project name of its own, waits until every service is healthy, bootstraps it
(``manage.py bootstrap --base-model tiny --token ci --json``), then creates and starts a short
run on ``code-humaneval`` through the REST API with that token and checks that its code was
verified in real sandboxes: outcomes of the candidate (pass, fail, runtime_error, ...), none
an infrastructure outcome (sandbox_error). The stack is always removed (``down -v``).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.deploy import images
from tests.services import require

pytestmark = [pytest.mark.slow, pytest.mark.services,
              # pytest.ini's 900 s also counts the module fixture: with nothing cached it builds three
              # base images, the wheelhouse and the image before the stack boots
              pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
HEALTHY_TIMEOUT_S = 420
"""Longest wait for every service to be healthy (the first health checks run 30 s after start)."""
RUN_TIMEOUT_S = 900
"""Longest wait for the run to end."""
INFRA_OUTCOMES = {"sandbox_error", "judge_error"}


def _compose_command() -> list[str] | None:
    tool = shutil.which("docker-compose")
    if tool:
        return [tool]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


def _docker_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    compose: list[str]
    env: dict
    url: str

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.compose, *args], cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def logs(self, service: str, lines: int = 60) -> str:
        return self.run("logs", "--no-color", "--tail", str(lines), service, check=False).stdout

    def states(self) -> dict[str, tuple[str, str, int]]:
        """service -> (status, health or '', exit code) of its container."""
        ids = self.run("ps", "-q").stdout.split()
        out = {}
        if ids:
            fmt = ('{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} '
                   '{{if .State.Health}}{{.State.Health.Status}}{{else}}-{{end}} {{.State.ExitCode}}')
            rows = subprocess.run(["docker", "inspect", "--format", fmt, *ids], capture_output=True, text=True).stdout
            for row in rows.split("\n"):
                if row.strip():
                    name, status, health, code = row.split()
                    out[name] = (status, "" if health == "-" else health, int(code))
        return out


def _services() -> list[str]:
    return list(yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"])


def _default_services() -> list[str]:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return [name for name, svc in spec.items() if not svc.get("profiles")]


def _wait_healthy(stack: Stack) -> None:
    expected = set(_default_services())
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        states = stack.states()
        bad = []
        for name in sorted(expected):
            status, health, code = states.get(name, ("missing", "", 0))
            if name == "migrate":  # one-shot: done once it exited 0
                if status == "exited" and code != 0:
                    raise AssertionError(f"migrate exited {code}:\n{stack.logs('migrate')}")
                if status != "exited":
                    bad.append((name, status, health))
            elif health != "healthy":
                bad.append((name, status, health))
        if not bad:
            return
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {name} ({status}, {health or 'no health'}):\n{stack.logs(name)}"
                           for name, status, health in bad)
            raise AssertionError(f"not healthy after {HEALTHY_TIMEOUT_S} s: {[b[0] for b in bad]}{logs}")
        time.sleep(3)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    compose = _compose_command()
    require(compose is not None, "docker-compose (apt-get install docker-compose) to boot docker-compose.yml")
    require(_docker_answers(), "a Docker engine (.ci/sandbox_setup.sh starts dockerd)")
    require(shutil.which("debootstrap") is not None, "debootstrap (apt-get install debootstrap) for the base images")

    bases = {image.name: images.build_base(image) for image in (images.DEBIAN, images.POSTGRES, images.REDIS)}
    lock = ROOT / "requirements" / "lock"
    wheels = images.wheelhouse((lock / "runtime.txt", lock / "nodeps.txt"), unlocked=(ROOT / "requirements" / "sandbox.txt",))
    project = f"tempertest{os.getpid()}"
    port = _free_port()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project, "SECRET_KEY": secrets.token_urlsafe(50),
           "TEMPER_HTTPS": "0", "TEMPER_PORT": str(port), "TEMPER_WEB_PROCESSES": "1",
           "ALLOWED_HOSTS": "localhost,127.0.0.1", "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{port}",
           "TEMPER_IMAGE": "temper-ci:compose-test", "TEMPER_BASE_IMAGE": bases["temper-ci-debian"],
           "TEMPER_POSTGRES_IMAGE": bases["temper-ci-postgres"], "TEMPER_REDIS_IMAGE": bases["temper-ci-redis"]}
    for key in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"):  # the suite's, not the stack's
        env.pop(key, None)
    stack = Stack(compose, env, f"http://127.0.0.1:{port}")

    # The image through the compose file's build section; pip reads the wheelhouse from the loopback.
    override = tmp_path_factory.mktemp("compose") / "build.yml"
    with images.serve(wheels) as wheel_url:
        override.write_text(yaml.safe_dump({"services": {"migrate": {"build": {"args": {
            "PIP_FIND_LINKS": wheel_url, "PIP_NO_INDEX": "1"}}}}}))
        Stack(compose + ["-f", "docker-compose.yml", "-f", str(override)], env, "").run("build", "migrate", timeout=1800)
    try:
        stack.run("up", "-d", "--no-build", timeout=600)
        _wait_healthy(stack)
        yield stack
    finally:
        stack.run("down", "-v", "--remove-orphans", check=False, timeout=300)


def _api(stack: Stack, token: str, method: str, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(stack.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {path}: {e.code} {e.read()[:2000]!r}") from None


def test_every_service_is_healthy_and_a_code_run_verifies_in_real_sandboxes(stack):
    states = stack.states()
    assert set(_default_services()) <= set(states)

    done = stack.run("exec", "-T", "web", "python", "manage.py", "bootstrap", "--base-model", "tiny",
                     "--token", "ci", "--json")
    boot = json.loads(done.stdout.strip().splitlines()[-1])
    assert boot["base_model"] == "base:tiny" and boot["token"]

    token = boot["token"]
    run = _api(stack, token, "POST", "/api/runs", {
        "name": "compose stack", "team": boot["team"], "base_model": boot["base_model"],
        "domains": [{"slug": "code-humaneval", "weight": 1.0}], "budget": {"steps": 2},
        "config": {"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 16},
                   "checkpoint": {"every_steps": 2}}})
    _api(stack, token, "POST", f"/api/runs/{run['id']}/start")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        detail = _api(stack, token, "GET", f"/api/runs/{run['id']}")
        if detail["state"] in ("completed", "failed", "cancelled"):
            break
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {s}:\n{stack.logs(s)}" for s in ("worker-control", "worker-rollout", "worker-train",
                                                                      "worker-verify"))
            raise AssertionError(f"run {run['id']} still {detail['state']} after {RUN_TIMEOUT_S} s{logs}")
        time.sleep(3)
    assert detail["state"] == "completed", (detail, stack.logs("worker-verify"), stack.logs("worker-control"))

    points, cursor = [], 0
    while True:
        page = _api(stack, token, "GET", f"/api/runs/{run['id']}/metrics?after={cursor}&limit=5000")
        points += page["items"]
        if not page["items"] or page["next_cursor"] == cursor:
            break
        cursor = page["next_cursor"]
    outcomes: dict[str, float] = {}
    for p in points:
        if p["key"].startswith("outcome/code-humaneval/"):
            name = p["key"].rsplit("/", 1)[1]
            outcomes[name] = outcomes.get(name, 0.0) + p["value"]
    print("code-humaneval outcomes:", outcomes)
    real = {k: v for k, v in outcomes.items() if k not in INFRA_OUTCOMES and v > 0}
    assert real, f"no candidate outcome of code-humaneval was recorded: {outcomes}"
    assert not any(outcomes.get(k, 0) for k in INFRA_OUTCOMES), (
        f"infrastructure outcomes in the stack's code verifications: {outcomes}\n{stack.logs('worker-verify', 120)}")
