"""What the browser benchmarks share: a fresh PostgreSQL database, daphne, Chromium, a login.

Production topology on one host: PostgreSQL, Redis as the channel layer, daphne serving pages,
the API and the websockets. Chromium is Debian's, driven by Playwright (PLATFORM.md).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-dev-shm-usage"]


def setup_django(db_name: str, *, fresh: bool = True) -> dict:
    """Point Django at ``db_name`` on the local PostgreSQL (created, or recreated when ``fresh``),
    migrate it, and return the environment for the server processes."""
    pg = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    import psycopg

    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db_name,)).fetchone()
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{db_name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{db_name}"')
    var = Path(tempfile.mkdtemp(prefix=f"temper-{db_name}-"))
    env = {"DATABASE_URL": f"{pg}/{db_name}", "REDIS_URL": redis_url, "TEMPER_VAR_DIR": str(var),
           "DJANGO_SETTINGS_MODULE": "controlplane.settings", "ALLOWED_HOSTS": "127.0.0.1,localhost", "DEBUG": "0",
           # A key strong enough for DEBUG off; plain HTTP on the loopback (TEMPER_HTTPS=0: no redirect
           # to HTTPS, cookies not Secure-only), as controlplane/settings/security.py allows for benchmarks.
           "SECRET_KEY": f"bench-{db_name}-" + hashlib.sha256(db_name.encode()).hexdigest(), "TEMPER_HTTPS": "0"}
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return {**os.environ, **env}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(cmd: list[str], env: dict, port: int, log: Path, what: str):
    """``cmd``, a web server on ``port``, in a child process of its own session with its output in
    ``log``; yields its base URL and the process once /healthz answers, and stops it afterwards."""
    from controlplane.web.supervisor import stop_processes

    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start")
                time.sleep(0.2)
        yield url, proc
    finally:
        stop_processes([proc], timeout=30, then_kill="process")


@contextmanager
def daphne(env: dict):
    """The ASGI server in a child process; yields its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"]
    with serving(cmd, env, port, Path(env["TEMPER_VAR_DIR"]) / "daphne.log", "daphne") as (url, _):
        yield url


def user_with_team(username: str, password: str, team_slug: str = "bench", role: str = "member"):
    from django.contrib.auth import get_user_model

    from controlplane.accounts.models import Membership, Team

    team, _ = Team.objects.get_or_create(slug=team_slug, defaults={"name": team_slug.title()})
    User = get_user_model()
    user = User.objects.filter(username=username).first() or User.objects.create_user(username=username)
    user.set_password(password)
    user.save()
    Membership.objects.get_or_create(user=user, team=team, defaults={"role": role})
    return user, team


def session_cookie(user) -> str:
    """A logged-in session for ``user`` (for websocket clients that are not a browser)."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0] if hasattr(settings, "AUTHENTICATION_BACKENDS") else "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    return store.session_key


@contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    path = os.environ.get("TEMPER_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("Chromium not found: apt-get install chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def login(browser, url: str, username: str, password: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=url)
    context.add_init_script(PLOTLY_WATCH_JS)
    page = context.new_page()
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login/" not in u)
    return page


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * q
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


# Run in every page before its own scripts (Playwright's init script: the page's CSP does not
# govern it): notes when plotly.js has been evaluated (its bundle assigns ``globalThis.Plotly``).
PLOTLY_WATCH_JS = """(() => {
  let value;
  Object.defineProperty(window, "Plotly", { configurable: true, get: () => value,
    set: (v) => { value = v; if (window.__plotlyAt === undefined) window.__plotlyAt = performance.now(); } });
})();"""

# Where a run page's first chart's time went, from the page's own performance entries (ms from
# navigation start): the HTML's first and last byte, the reward series request, plotly.js's
# download and the end of its evaluation, deferred scripts done, first contentful paint, the
# first reward chart drawn with points (``firstDrawMs``) and plotly's own first reward chart.
BREAKDOWN_JS = """(() => {
  const n = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource");
  const series = res.find((e) => e.name.includes("/series?"));
  const plotly = res.find((e) => e.name.includes("plotly"));
  const fcp = performance.getEntriesByType("paint").find((e) => e.name === "first-contentful-paint");
  const r = (v) => (v === undefined || v === null ? null : Math.round(v));
  const live = window.TemperLive || {};
  const plotlyDraw = live.plotlyDrawMs !== undefined ? live.plotlyDrawMs : ("sketchMs" in live ? undefined : live.firstDrawMs);
  return {html_first_byte: r(n.responseStart), html_done: r(n.responseEnd), html_bytes: n.decodedBodySize,
          series_start: r(series && series.startTime), series_done: r(series && series.responseEnd),
          plotly_done: r(plotly && plotly.responseEnd), plotly_from_sw: !!(plotly && plotly.workerStart > 0),
          plotly_evaluated: r(window.__plotlyAt), scripts_done: r(n.domContentLoadedEventStart),
          first_paint: r(fcp && fcp.startTime), first_draw: r(live.firstDrawMs), plotly_draw: r(plotlyDraw)};
})()"""


# Plotly's reward chart is drawn (where the page had a server-drawn one first, plotlyDrawMs; before
# that existed, firstDrawMs was plotly's).
PLOTLY_DRAWN_JS = """() => { const l = window.TemperLive;
  return !!l && (l.plotlyDrawMs !== undefined || (l.firstDrawMs !== undefined && !("sketchMs" in l))); }"""


def breakdown_line(b: dict) -> str:
    """One line of a run page's breakdown (BREAKDOWN_JS), for the bench's log."""
    return (f"html {b['html_first_byte']}-{b['html_done']} ms ({b['html_bytes']} B), series {b['series_start']}-{b['series_done']} ms, "
            f"plotly.js downloaded {b['plotly_done']} ms (service worker: {b['plotly_from_sw']}), evaluated {b['plotly_evaluated']} ms, "
            f"deferred scripts done {b['scripts_done']} ms, first paint {b['first_paint']} ms, first chart {b['first_draw']} ms, "
            f"plotly's chart {b['plotly_draw']} ms")
