"""Production settings, the Content-Security-Policy, login throttling, password validators and
the 404s a production server gives (controlplane/settings/security.py, common/security.py,
accounts/throttle.py)."""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.contrib.auth import get_user_model

from controlplane.accounts import throttle
from tests import factories

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_WARNINGS = {"security.W004", "security.W008", "security.W012", "security.W016"}
"""What `check --deploy` said of the compose settings before production settings existed."""


def _compose_web_environment(**given: str) -> dict[str, str]:
    """The environment docker compose gives the ``web`` service, its ``${VAR:-default}`` and
    ``${VAR:?message}`` references resolved from ``given`` as compose would from the shell."""
    web = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"]
    env = {}
    for name, value in web["environment"].items():
        def resolve(m: re.Match) -> str:
            var, op, rest = m.group(1), m.group(2), m.group(3)
            if var in given:
                return given[var]
            if op == ":?":
                raise AssertionError(f"docker-compose.yml: {name} needs {var} from the environment: {rest}")
            return rest or ""
        env[name] = re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", resolve, str(value))
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_check_deploy_is_clean_under_the_compose_settings(tmp_path):
    env = _compose_web_environment(SECRET_KEY=secrets.token_urlsafe(50))
    assert env["DEBUG"] == "0"
    env["TEMPER_VAR_DIR"] = str(tmp_path)  # the image's /var/lib/temper volume
    result = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr
    # The same settings with HTTPS-only turned off draw exactly the warnings the issue found.
    plain = _manage({**env, "TEMPER_HTTPS": "0"}, "check", "--deploy")
    assert set(re.findall(r"security\.W\d+", plain.stdout + plain.stderr)) == DEPLOY_WARNINGS


@pytest.mark.slow
def test_production_refuses_a_weak_or_missing_secret_key(tmp_path):
    env = {"DEBUG": "0", "TEMPER_VAR_DIR": str(tmp_path)}
    for key in ("", "short-key", "django-insecure-" + secrets.token_urlsafe(50)):
        result = _manage({**env, "SECRET_KEY": key}, "check")
        assert result.returncode != 0
        assert "SECRET_KEY: required when DEBUG is off" in result.stderr if not key else "SECRET_KEY: too weak" in result.stderr


def test_a_production_404_lists_no_url_patterns_and_the_apis_is_json(client, settings):
    settings.DEBUG = False
    page = client.get("/no-such-page/")
    assert page.status_code == 404
    assert b"URLconf" not in page.content and b"api/" not in page.content
    api = client.get("/api/no/such/endpoint")
    assert api.status_code == 404 and api["Content-Type"] == "application/json"
    assert api.json() == {"detail": "no such endpoint: /api/no/such/endpoint", "errors": []}


def test_the_apis_404_is_json_in_debug_too(client, settings):
    settings.DEBUG = True
    api = client.get("/api/no-such-endpoint/")
    assert api.status_code == 404 and api.json()["detail"] == "no such endpoint: /api/no-such-endpoint/"


def test_https_only_settings_redirect_and_mark_cookies_secure(client, settings, world):
    """DEBUG=0's defaults, behind a proxy that says HTTPS in X-Forwarded-Proto."""
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    plain = client.get("/login/")
    assert plain.status_code == 301 and plain["Location"] == "https://testserver/login/"
    assert client.get("/healthz").status_code == 200  # health checks probe over plain HTTP
    https = {"X-Forwarded-Proto": "https"}
    page = client.get("/login/", headers=https)
    assert page.status_code == 200
    assert page["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert page["X-Frame-Options"] == "DENY" and page["X-Content-Type-Options"] == "nosniff"
    assert page["Referrer-Policy"] == "same-origin"
    assert page.cookies["csrftoken"]["secure"]
    signed_in = client.post("/login/", {"username": "acme-viewer", "password": "pw-123456"}, headers=https)
    assert signed_in.status_code == 302 and signed_in.cookies["sessionid"]["secure"]


# --- the Content-Security-Policy ---------------------------------------------------------------

def _directives(response) -> dict[str, str]:
    return dict(d.split(" ", 1) for d in response["Content-Security-Policy"].split("; "))


def test_every_page_has_a_csp_with_a_fresh_nonce(client, world):
    client.force_login(world.users["member"])
    first, second = client.get("/"), client.get("/")
    a, b = _directives(first), _directives(second)
    nonce = re.search(r"'nonce-([^']+)'", a["script-src"]).group(1)
    assert len(nonce) >= 16 and nonce not in b["script-src"]
    assert a["default-src"] == "'self'" and a["object-src"] == "'none'" and a["base-uri"] == "'self'"
    assert a["frame-ancestors"] == "'none'" and "'unsafe-inline'" not in a["script-src"]
    assert a["connect-src"] == "'self' ws://testserver wss://testserver"


def test_pages_have_no_inline_script_and_no_inline_handler():
    """An inline script or on...= handler would be refused by the policy in every browser."""
    templates = list((ROOT / "frontend" / "templates").rglob("*.html"))
    assert templates
    for path in templates:
        text = path.read_text()
        for tag in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in tag or 'type="application/json"' in tag, f"{path}: inline script {tag}"
        assert not re.search(r"\son[a-z]+\s*=", text), f"{path}: inline event handler"
        assert "javascript:" not in text, f"{path}: javascript: URL"


def test_csp_can_be_report_only_or_off(client, settings):
    settings.TEMPER_CSP_REPORT_ONLY = True
    r = client.get("/login/")
    assert "Content-Security-Policy" not in r and "script-src 'self'" in r["Content-Security-Policy-Report-Only"]
    settings.TEMPER_CSP = False
    r = client.get("/login/")
    assert "Content-Security-Policy" not in r and "Content-Security-Policy-Report-Only" not in r


# --- login throttling ----------------------------------------------------------------------------

class Clock:
    """Seconds since the epoch, moved by the test (each test starts in a window of its own, so
    counts left in the cache by other tests or runs never meet it)."""

    def __init__(self):
        self.now = float(secrets.randbelow(10**6) * 86_400 * 365)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch, settings):
    c = Clock()
    monkeypatch.setattr(throttle, "clock", c)
    # Aligned to the window's start, so the test knows how long the window has left.
    c.now -= c.now % settings.TEMPER_LOGIN_WINDOW_S
    return c


def _sign_in(client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_thirty_wrong_passwords_then_the_right_one_is_refused(client, world, clock, settings):
    assert settings.TEMPER_LOGIN_MAX_FAILURES_PER_USER == 5 and settings.TEMPER_LOGIN_WINDOW_S == 900
    for i in range(30):
        r = _sign_in(client, "acme-viewer", f"wrong-{i}", address=f"10.1.{i}.1")  # 30 addresses: the user rule
        # The 5th failure is answered with the refusal already: the next try will be refused.
        assert r.status_code == (200 if i < 4 else 429), i
    clock.now += 60
    r = _sign_in(client, "acme-viewer", "pw-123456", address="10.9.9.9")
    assert r.status_code == 429 and r["Retry-After"] == "840"
    assert "Too many failed sign-ins for this username. Try again in 14 minutes." in r.content.decode()
    assert "_auth_user_id" not in client.session
    # Another user is not held back by acme-viewer's failures.
    assert _sign_in(client, "acme-member", "pw-123456", address="10.9.9.9").status_code == 302


def test_an_address_over_its_limit_is_refused_for_every_username(client, world, clock, settings):
    settings.TEMPER_LOGIN_MAX_FAILURES_PER_ADDRESS = 20
    for i in range(20):
        # 20 usernames, never 5 failures for one: only the address rule can refuse.
        r = _sign_in(client, f"guess-{i}", "wrong", address="10.2.0.1")
        assert r.status_code == (200 if i < 19 else 429), i
    r = _sign_in(client, "acme-admin", "pw-123456", address="10.2.0.1")
    assert r.status_code == 429
    assert "Too many failed sign-ins from your address." in r.content.decode()
    # The same user from another address signs in.
    assert _sign_in(client, "acme-admin", "pw-123456", address="10.2.0.2").status_code == 302


def test_after_the_window_the_right_password_is_accepted(client, world, clock, settings):
    for i in range(6):
        _sign_in(client, "acme-viewer", f"wrong-{i}")
    assert _sign_in(client, "acme-viewer", "pw-123456").status_code == 429
    clock.now += settings.TEMPER_LOGIN_WINDOW_S
    r = _sign_in(client, "acme-viewer", "pw-123456")
    assert r.status_code == 302 and client.session["_auth_user_id"] == str(world.users["viewer"].pk)


def test_a_successful_sign_in_resets_the_users_count(client, world, clock):
    for i in range(4):
        _sign_in(client, "acme-viewer", f"wrong-{i}", address=f"10.3.{i}.1")
    assert _sign_in(client, "acme-viewer", "pw-123456", address="10.3.9.1").status_code == 302
    client.logout()
    for i in range(4):
        assert _sign_in(client, "acme-viewer", f"again-{i}", address=f"10.4.{i}.1").status_code == 200
    assert _sign_in(client, "acme-viewer", "pw-123456", address="10.4.9.1").status_code == 302


def test_the_admin_login_is_throttled_too(client, world, clock):
    for i in range(5):
        client.post("/admin/login/", {"username": "root", "password": f"wrong-{i}"}, REMOTE_ADDR="10.5.0.1")
    r = client.post("/admin/login/?next=/admin/", {"username": "root", "password": "pw-123456"}, REMOTE_ADDR="10.5.0.2")
    assert r.status_code == 200 and "Too many failed sign-ins for this username." in r.content.decode()
    assert "_auth_user_id" not in client.session


def test_authenticate_itself_refuses_a_throttled_username(world, clock, rf):
    """Any caller of authenticate(), not only the login pages, meets the limit."""
    from django.contrib.auth import authenticate

    request = rf.post("/anything/", REMOTE_ADDR="10.6.0.1")
    for i in range(5):
        assert authenticate(request, username="acme-member", password=f"wrong-{i}") is None
    assert authenticate(request, username="acme-member", password="pw-123456") is None
    clock.now += 900
    assert authenticate(request, username="acme-member", password="pw-123456") == world.users["member"]


def test_guesses_in_flight_together_never_exceed_the_limit(db, clock, settings):
    """Each attempt takes its count before its password is checked: of ten guesses whose
    passwords are all being checked at once, only the first five get that far."""
    attempts = [throttle.Attempt.begin(username="acme-viewer", address=f"10.7.0.{i}") for i in range(10)]
    assert [a.refusal is None for a in attempts] == [True] * 5 + [False] * 5
    assert attempts[-1].refusal.rule == "user"


# --- password validators ---------------------------------------------------------------------------

@pytest.mark.parametrize("password, message", [
    ("a1b2c3", "too short"),
    ("password123", "too common"),
    ("83920174651", "entirely numeric"),
    ("new-teammate-1", "too similar to the username"),
])
def test_the_admin_refuses_a_weak_password_for_a_new_user(client, world, password, message):
    client.force_login(world.staff)
    r = client.post("/admin/auth/user/add/", {"username": "new-teammate", "usable_password": "true",
                                               "password1": password, "password2": password})
    assert r.status_code == 200 and message in r.content.decode()
    assert not get_user_model().objects.filter(username="new-teammate").exists()


def test_the_admin_accepts_a_strong_password(client, world):
    client.force_login(world.staff)
    strong = secrets.token_urlsafe(16)
    r = client.post("/admin/auth/user/add/", {"username": "new-teammate", "usable_password": "true",
                                               "password1": strong, "password2": strong})
    assert r.status_code == 302
    assert get_user_model().objects.get(username="new-teammate").check_password(strong)


def test_factories_set_passwords_without_the_validators(db):
    """Test users keep short, memorable passwords: create_user hashes without validating."""
    assert factories.user("weak", password="123").check_password("123")
