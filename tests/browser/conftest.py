"""Browser tests: Debian's Chromium driven by Playwright against the real ASGI server (daphne),
PostgreSQL, Redis and a Celery worker, all started by the fixtures. Screenshots go to
``artifacts/screenshots/`` (CI keeps ``artifacts/``)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from tests.services import require, require_postgres, require_redis, start_celery_worker, stop_processes, worker_env

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    return os.environ.get("TEMPER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser(monkeypatch):
    """Chromium for one test. Playwright's sync API keeps an event loop running in this thread
    while it is open, which Django takes for an async context; the test's own ORM calls are
    plain synchronous code, so the check is lifted for this test only (and the browser is closed
    before the next test)."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    path = chromium_path()
    require(bool(path), "Chromium: apt-get install chromium (or set TEMPER_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - it is in requirements.txt
        require(False, "the playwright Python package")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PASSWORD = "browser-pass-123"
"""The password of every user a browser test logs in as."""


class Server:
    """The web server (daphne) and, with ``workers=True``, a Celery worker on every queue."""

    def __init__(self, url: str, var_dir: Path, env: dict):
        self.url, self.var_dir, self.env = url, var_dir, env

    def page(self, browser, name: str):
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=self.url)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.screenshot_name = name
        return page

    def login(self, page, username: str, password: str) -> None:
        page.goto("/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda u: "/login/" not in u)

    def logged_in_page(self, browser, name: str, username: str, password: str = PASSWORD):
        """A new page (screenshots named ``name``) on which ``username`` has logged in."""
        page = self.page(browser, name)
        self.login(page, username, password)
        return page


def browser_user(team, role: str, name: str):
    """A member of ``team`` with ``role`` who can log in with :data:`PASSWORD`."""
    from tests import factories

    user = factories.member(team, role, name)
    user.set_password(PASSWORD)
    user.save()
    return user


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daphne exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"daphne did not answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def server(transactional_db, tmp_path, request):
    """daphne on a free port over the test database, with Redis as the channel layer and broker.

    Mark a test ``@pytest.mark.workers`` to also start a Celery worker on every queue a run uses
    (not ``audit``: the audits of the domains a test syncs are not what it looks at)."""
    require_postgres()
    redis_url = require_redis()
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(var_dir), DEBUG="1",
                     ALLOWED_HOSTS="127.0.0.1,localhost")
    port = free_port()
    log = tmp_path / "daphne.log"
    web = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
                           cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    procs = [web]
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url, web, log)
        if request.node.get_closest_marker("workers"):
            from django.conf import settings

            procs.append(start_celery_worker(env, "browser", ",".join(settings.CELERY_QUEUES_RUN), concurrency=2,
                                             log_path=tmp_path / "worker.log"))
        yield Server(url, var_dir, env)
    finally:
        stop_processes(procs, timeout=30, then_kill="process")


@pytest.fixture(autouse=True)
def _fast_password_hashing():
    """The server process checks passwords with the production hashers, so keep them here too."""
