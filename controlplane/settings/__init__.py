"""Django settings, read from the environment.

Every variable has a default that works on a laptop with nothing installed (the "embedded
default"): SQLite under var/, a broker that needs no server, the in-memory channel layer and a
secret key generated into var/. Integrations live in their own modules (celery, channels, ...);
the sandbox runtime reads its TEMPER_SANDBOX_* variables itself (workers/sandbox never imports
Django).
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.env import debug, env_bool, env_int, env_list  # noqa: F401 (importable from here, as before)
from controlplane.web.vendor import FULL_BUNDLE as _plotly_full, PLOTLY_BASIC as _plotly_basic, plotly_js as _plotly_js  # stdlib only

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(os.environ.get("TEMPER_VAR_DIR", BASE_DIR / "var")).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)
TEMPER_STORE = os.environ.get("TEMPER_STORE", "").strip()
"""Where run checkpoints, registry versions and exports live (``checkpoints/``, ``registry/``,
``exports/``, see ``controlplane.common.storage``): a directory every host's workers and web read
and write at the same absolute path (an NFS or other shared mount); unset: ``TEMPER_VAR_DIR``
(one host)."""
if TEMPER_STORE:
    if not os.path.isabs(TEMPER_STORE):
        raise ImproperlyConfigured(f"TEMPER_STORE={TEMPER_STORE!r}: must be an absolute path (the same on every host)")
    Path(TEMPER_STORE).mkdir(parents=True, exist_ok=True)


DEBUG = debug()


def _strong(key: str) -> bool:
    return (len(key) >= SECRET_KEY_MIN_LENGTH and len(set(key)) >= SECRET_KEY_MIN_UNIQUE_CHARACTERS
            and not key.startswith(SECRET_KEY_INSECURE_PREFIX))


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY", "")
    if key and not DEBUG and not _strong(key):
        # What `check --deploy` would only warn about (security.W009) stops a production start.
        raise ImproperlyConfigured(
            f"SECRET_KEY: too weak for DEBUG off: needs {SECRET_KEY_MIN_LENGTH} characters or more, "
            f"{SECRET_KEY_MIN_UNIQUE_CHARACTERS} different ones, and no {SECRET_KEY_INSECURE_PREFIX!r} prefix; "
            "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY: required when DEBUG is off")
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # Swagger UI for /api/docs served from here (not a CDN), and CSP-clean
    "controlplane.accounts",
    "controlplane.domains",
    "controlplane.runs",
    "controlplane.scheduling",
    "controlplane.registry",
    "controlplane.web",
    "controlplane.live",
    "controlplane.review",
    "controlplane.alerts",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "controlplane.common.body.BodyLimitMiddleware",  # before anything that could read the body
    "controlplane.common.security.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "controlplane.web.context.team_context",
                "controlplane.common.security.context",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'temper.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several processes (web, worker, beat) share the file in the embedded default.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"timeout": 30, "transaction_mode": "IMMEDIATE"})
_pool_size = os.environ.get("TEMPER_DB_POOL_SIZE", "") or "0"
if not _pool_size.isdigit():
    raise ImproperlyConfigured(f"TEMPER_DB_POOL_SIZE: must be 0 (no pool) or a positive integer, got {_pool_size!r}")
TEMPER_DB_POOL_SIZE = int(_pool_size)
"""Web processes on PostgreSQL (compose's web sets it): each request borrows one of at most this
many connections of its process instead of opening its own (a PostgreSQL backend started and
stopped per request: p95 -15 to -25% under 20 clients, bench/api_load.py). 0: no pool. Not for
Celery workers: the pool's threads do not survive their fork."""
if TEMPER_DB_POOL_SIZE and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": TEMPER_DB_POOL_SIZE, "timeout": 10}
    # The pool checks a connection before lending it: one PostgreSQL dropped (a restart) is replaced.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    # Django's standard four; they run wherever a password is chosen (createsuperuser asked
    # interactively, changepassword, the admin's user forms).
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # Django's ModelBackend that first refuses a username or address over its limit of failed
    # sign-ins (TEMPER_LOGIN_*), whatever the password: the login page, the admin's, any caller.
    "controlplane.accounts.throttle.ThrottledModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
def _plotly_js_dir() -> Path:
    """plotly.min.js ships inside the plotly package: served from there, no CDN, no Node build."""
    import plotly  # lazy: only settings need it, and only its location

    return Path(plotly.__file__).resolve().parent / "package_data"


STATICFILES_DIRS = [BASE_DIR / "frontend" / "static", ("vendor/plotly", _plotly_js_dir())]
if _plotly_basic.directory.is_dir():
    STATICFILES_DIRS.append((_plotly_basic.static_prefix, _plotly_basic.directory))
TEMPER_PLOTLY_BUNDLE = os.environ.get("TEMPER_PLOTLY_BUNDLE", "").strip() or "basic"
"""``basic`` (the default): pages load plotly.js's basic bundle (1.1 MB) when ``make install`` fetched
it, else the plotly package's full bundle (4.8 MB); ``full``: always the full one (the baseline of
``bench/page_load.py``). controlplane/web/vendor.py."""
if TEMPER_PLOTLY_BUNDLE not in ("basic", "full"):
    raise ImproperlyConfigured(f"TEMPER_PLOTLY_BUNDLE: {TEMPER_PLOTLY_BUNDLE!r} is not one of basic, full")
TEMPER_PLOTLY_JS = _plotly_js() if TEMPER_PLOTLY_BUNDLE == "basic" else _plotly_full
STATIC_ROOT = VAR_DIR / "static"

REDIS_URL = os.environ.get("REDIS_URL", "")

TEMPER_DRIVER_LEASE_S = float(os.environ.get("TEMPER_DRIVER_LEASE_S", 40))
TEMPER_MIN_RUN_S = float(os.environ.get("TEMPER_MIN_RUN_S", 60))
TEMPER_CURRENCY = (os.environ.get("TEMPER_CURRENCY", "").strip() or "USD").upper()
"""The one currency of every price (``ResourcePool.price``) and cost, an ISO 4217 code (USD)."""
if not (len(TEMPER_CURRENCY) == 3 and TEMPER_CURRENCY.isascii() and TEMPER_CURRENCY.isalpha()):
    raise ImproperlyConfigured(f"TEMPER_CURRENCY: {TEMPER_CURRENCY!r} is not a three-letter ISO 4217 code (USD, EUR)")
TEMPER_PROMOTION_MAX_REGRESSION = float(os.environ.get("TEMPER_PROMOTION_MAX_REGRESSION", 0.02))
TEMPER_VERIFY_DEADLINE_S = float(os.environ.get("TEMPER_VERIFY_DEADLINE_S", 0))  # 0: from the domains' task timeouts
TEMPER_MODEL_DIRS = [VAR_DIR / "models"] + [
    Path(p.strip()) for p in os.environ.get("TEMPER_MODEL_DIRS", "").replace(os.pathsep, ",").split(",") if p.strip()]
"""Roots a run, a judge or a tokenizer may name a model directory under: ``var/models`` (where the
demo builds its model) and those TEMPER_MODEL_DIRS adds, comma- or ``os.pathsep``-separated
(symlinks resolved, then checked; controlplane/common/model_refs.py). Checkpoints and registry
copies are never reachable as raw paths: teams name those ``registry:<version>``."""

TEMPER_ROLLOUT_ENGINES = [e.strip() for e in os.environ.get("TEMPER_ROLLOUT_ENGINES", "").split(",") if e.strip()]
"""The rollout engines (``torch``, ``vllm``) this installation's rollout and eval workers can run,
comma-separated; empty (the default): those installed where the web app runs, which is right when
web and workers share one environment (the demo, the image). A run or an evaluation naming another
engine is refused at ``config.rollout.engine`` (``engine``) before it is saved
(controlplane/common/engines.py); the worker checks its own host again before it loads anything."""
if unknown := sorted(set(TEMPER_ROLLOUT_ENGINES) - {"torch", "vllm"}):
    raise ImproperlyConfigured(f"TEMPER_ROLLOUT_ENGINES: unknown engine(s) {', '.join(unknown)} (one of: torch, vllm)")

# Request bodies (controlplane/common/body.py): refused from Content-Length before they are read.
TEMPER_API_MAX_BODY_BYTES = int(os.environ.get("TEMPER_API_MAX_BODY_BYTES", 4 * 1024 * 1024))
"""The largest JSON body an API endpoint (and any page) accepts; larger ones are answered 413."""
TEMPER_UPLOAD_MAX_BYTES = int(os.environ.get("TEMPER_UPLOAD_MAX_BYTES", 50 * 1024 * 1024))
"""The largest body of an upload (``POST /api/domains/upload``, its JSONL included)."""
TEMPER_API_MAX_JSON_DEPTH = int(os.environ.get("TEMPER_API_MAX_JSON_DEPTH", 64))
"""How deep arrays and objects may nest in a body (a JSONL line too); deeper is a 422."""
# Django's own limit answers 400 and would refuse an upload the app accepts: it sits at the
# largest of the app's limits, so only the app's checks (413, with the setting named) refuse.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(TEMPER_API_MAX_BODY_BYTES, TEMPER_UPLOAD_MAX_BYTES)
# Bodies and uploaded files above this go to a temporary file instead of memory (Django's ASGI
# handler spools every request body this way before a view runs).
FILE_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("FILE_UPLOAD_MAX_MEMORY_SIZE", 2_621_440))

NINJA_PAGINATION_CLASS = "controlplane.common.api.Pagination"
NINJA_PAGINATION_PER_PAGE = 100
NINJA_PAGINATION_MAX_LIMIT = 1000

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

from controlplane.settings.celery import *  # noqa: E402,F401,F403
from controlplane.settings.channels import *  # noqa: E402,F401,F403
from controlplane.settings.review import *  # noqa: E402,F401,F403
from controlplane.settings.alerts import *  # noqa: E402,F401,F403
from controlplane.settings.security import *  # noqa: E402,F401,F403
