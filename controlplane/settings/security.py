"""Security settings: HTTPS-only cookies and redirects, HSTS, the Content-Security-Policy, login
throttling and the cache it counts in. Each is read from the environment.

With ``DEBUG`` on (the embedded default, ``manage.py demo``) the site is served over plain HTTP on
a laptop, so nothing here asks for HTTPS. With ``DEBUG`` off (``docker compose``, production) every
HTTPS setting is on unless the environment says otherwise: the site is reached over HTTPS, either
directly or through a proxy that terminates TLS and says so in a header it sets
(``TEMPER_PROXY_SSL_HEADER``). ``TEMPER_HTTPS=0`` turns the HTTPS-only settings off together, for a
plain-HTTP trial on localhost or a loopback benchmark (``manage.py check --deploy`` then warns, as
it should). The CSP and login throttling are on in both modes, so the demo and the tests run
under them too.
"""
from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.env import debug, env_bool, env_int

_VAR = Path(os.environ.get("TEMPER_VAR_DIR", Path(__file__).resolve().parent.parent.parent / "var")).resolve()
_REDIS = os.environ.get("REDIS_URL", "")


def proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``"X-Forwarded-Proto: https"`` (or ``X-Forwarded-Proto=https``) as Django's
    ``SECURE_PROXY_SSL_HEADER``: the ``request.META`` key and the value that means HTTPS.

    >>> proxy_ssl_header("X-Forwarded-Proto: https")
    ('HTTP_X_FORWARDED_PROTO', 'https')
    >>> proxy_ssl_header("") is None
    True
    """
    if not value.strip():
        return None
    for sep in (":", "="):
        name, found, expected = value.partition(sep)
        if found and name.strip() and expected.strip():
            return "HTTP_" + name.strip().upper().replace("-", "_"), expected.strip()
    raise ImproperlyConfigured(
        f"TEMPER_PROXY_SSL_HEADER: must be 'Header-Name: value' (e.g. 'X-Forwarded-Proto: https'), got {value!r}")


TEMPER_HTTPS = env_bool("TEMPER_HTTPS", not debug())
"""Whether the site is served over HTTPS only; the default for the four settings below."""

SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", TEMPER_HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # health checks probe the container over plain HTTP
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", TEMPER_HTTPS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", TEMPER_HTTPS)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if TEMPER_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
"""The header only allows a submission to the browsers' preload list; nothing submits it."""
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(os.environ.get("TEMPER_PROXY_SSL_HEADER", ""))
"""Set only behind a proxy that overwrites this header on every request: anyone reaching the
server directly could otherwise claim HTTPS."""

SECURE_CONTENT_TYPE_NOSNIFF = env_bool("SECURE_CONTENT_TYPE_NOSNIFF", True)
SECURE_REFERRER_POLICY = os.environ.get("SECURE_REFERRER_POLICY", "same-origin")
SECURE_CROSS_ORIGIN_OPENER_POLICY = os.environ.get("SECURE_CROSS_ORIGIN_OPENER_POLICY", "same-origin")
X_FRAME_OPTIONS = os.environ.get("X_FRAME_OPTIONS", "DENY")
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # frontend/static/js/common.js sends it back as X-CSRFToken

TEMPER_CSP = env_bool("TEMPER_CSP", True)
"""Send a Content-Security-Policy (``controlplane.common.security``) on every response."""
TEMPER_CSP_REPORT_ONLY = env_bool("TEMPER_CSP_REPORT_ONLY", False)
"""Send it as ``Content-Security-Policy-Report-Only``: violations are reported in the browser's
console, nothing is blocked."""

TEMPER_LOGIN_MAX_FAILURES_PER_USER = env_int("TEMPER_LOGIN_MAX_FAILURES_PER_USER", 5, minimum=1)
"""Failed sign-ins for one username within a window before that username is refused."""
TEMPER_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("TEMPER_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1)
"""Failed sign-ins from one client address within a window before that address is refused."""
TEMPER_LOGIN_WINDOW_S = env_int("TEMPER_LOGIN_WINDOW_S", 900, minimum=1)
"""The throttling window (seconds)."""

if _REDIS:
    # Shared by every web process, so a limit holds however many processes serve the site.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _REDIS,
                          "KEY_PREFIX": "temper"}}
else:
    # Files under var/: shared by the embedded default's processes without a server.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                          "LOCATION": str(_VAR / "cache"), "KEY_PREFIX": "temper"}}
