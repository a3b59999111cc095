"""`make demo`'s command brings the site up on the embedded default; login and the admin work, and
the demo run's checkpoints are evaluated on an auto-evaluating held-out suite saved before it."""
from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from controlplane.web.management.commands.demo_setup import DEMO_DOMAINS
from tests.services import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_demo_serves_login_and_admin_lists_domains_and_its_suite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env["TEMPER_VAR_DIR"] = str(tmp_path / "var")
    port = _free_port()
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        lines = []
        for raw in demo.stdout:
            lines.append(raw.decode(errors="replace"))
            match = re.search(r"Temper is up at (\S+)\s+\(user (\S+), password (\S+)\)", lines[-1])
            if match:
                break
        else:
            raise AssertionError("demo exited: " + "".join(lines)[-3000:])
        url, user, password = match.groups()
        logs = sorted((tmp_path / "var" / "logs").glob("*.log"))
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.jar = jar
        page = opener.open(url + "login/", timeout=10).read().decode()  # the banner comes once it serves
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode({"username": user, "password": password, "csrfmiddlewaretoken": csrf, "next": "/"}).encode()
        home = opener.open(urllib.request.Request(url + "login/", data=form, headers={"Referer": url + "login/"}), timeout=10)
        assert home.geturl() == url and b"Runs" in home.read()
        admin = opener.open(url + "admin/domains/domain/", timeout=10).read().decode()
        for slug in (*DEMO_DOMAINS, "builtin-parity"):  # the demo's domains, and every built-in one
            assert slug in admin
        suites = {s["slug"]: s for s in json.loads(opener.open(url + "api/registry/suites", timeout=10).read())}
        suite = suites["demo-heldout"]
        assert suite["team"] == "demo" and suite["auto_evaluate"] is True and suite["version"] == 1
        assert {i["domain"] for i in suite["items"]} == set(DEMO_DOMAINS)
        runs = json.loads(opener.open(url + "api/runs", timeout=10).read())["items"]
        assert sorted(r["name"] for r in runs) == ["demo: judged capitals (for review)", "demo: tiny model on the built-in domains"]
        judges = json.loads(opener.open(url + "api/judges", timeout=10).read())["items"]
        assert [(j["slug"], j["active_version"]) for j in judges] == [("demo-similarity", 1)]
        review = opener.open(url + "review/", timeout=10).read().decode()
        assert 'data-testid="queue-create"' in review and "capitals-judged" in review  # the admin can sample a queue

        # Unattended, as a newcomer leaves it: run 1 trains, the judged run completes (its judge
        # batches are served beside the two drivers), and its answers can be sampled and labelled.
        def run_named(prefix):
            return next(r for r in api(opener, url, "GET", "api/runs")["items"] if r["name"].startswith(prefix))

        def judged_done():
            judged = run_named("demo: judged")
            assert judged["state"] not in ("failed", "paused", "cancelled"), judged
            return judged if judged["state"] == "completed" else None

        judged = wait_for(judged_done, 900, "the judged run to complete without help", logs=logs)
        assert judged["current_step"] == 20
        # run 1 waits for its built-in domains' audits first (longer on a loaded machine), then trains
        wait_for(lambda: run_named("demo: tiny model")["current_step"] >= 5, 600, "run 1 to train 5 steps", logs=logs)
        queue = api(opener, url, "POST", "api/review/queues", {"team": "demo", "domain": "capitals-judged",
                                                               "judge": "demo-similarity", "name": "first",
                                                               "strategy": "stratified", "size": 12})
        queue = wait_for(lambda: (q := api(opener, url, "GET", f"api/review/queues/{queue['id']}"))["state"] != "sampling" and q,
                         120, "the demo's judge worker to sample the review queue", logs=logs)
        assert queue["state"] == "ready" and queue["population"] > 0 and queue["progress"]["items"] > 0
        labelled = 0
        while (nxt := api(opener, url, "POST", f"api/review/queues/{queue['id']}/next", {}))["item"] is not None:
            api(opener, url, "POST", f"api/review/items/{nxt['item']['id']}/label", {"value": labelled % 2})
            labelled += 1
        after = api(opener, url, "GET", f"api/review/queues/{queue['id']}")
        assert labelled == queue["progress"]["items"] and after["progress"]["complete"] == labelled
        # RL health is watched by default, and the demo's honest runs stay healthy: their
        # importance weights are recorded and no health rule fired on either run.
        tiny = run_named("demo: tiny model")
        ess = api(opener, url, "GET", f"api/runs/{tiny['id']}/metrics?after=0&key=health/ess")["items"]
        assert ess and all(p["key"] == "health/ess" and p["value"] > 0.9 for p in ess), ess
        fired = {f["rule_name"] for f in api(opener, url, "GET", "api/alerts/firings?limit=1000")["items"]}
        assert not fired & HEALTH_RULES, fired
        # Nothing in the demo's logs went wrong on the way.
        tracebacks = {log.name: log.read_text(errors="replace").count("Traceback") for log in logs}
        assert not any(tracebacks.values()), tracebacks
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=60)


HEALTH_RULES = {"KL spike", "Entropy collapse", "Logprob mismatch", "Importance weights high", "Importance weights low",
                "Effective sample size low", "Truncated completions"}
"""The RL health rules every run is watched by (controlplane/alerts/migrations/0003_rl_health_rules.py)."""


def api(opener, url: str, method: str, path: str, body: dict | None = None) -> dict:
    """A call of the demo's API with the session's cookie (and its CSRF token for a write)."""
    headers = {"Content-Type": "application/json", "Referer": url}
    for cookie in opener.jar:
        if cookie.name == "csrftoken":
            headers["X-CSRFToken"] = cookie.value
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        return json.loads(opener.open(request, timeout=30).read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:2000]!r}") from None
