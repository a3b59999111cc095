"""The Content-Security-Policy every response carries.

Pages run only scripts served from this origin (frontend/static/js, plotly.js: the basic bundle
fetched at install time or the plotly package's full one, the admin's, Swagger UI's from django-ninja) or an inline ``<script>`` that
carries the response's nonce (``{{ csp_nonce }}`` in templates, from ``context``). The pages
themselves have no inline script and no ``on...=`` handler: page data travels in
``<script type="application/json">`` blocks (``json_script``), which the browser never executes
and CSP does not govern. So an injected ``<script>`` or ``onerror=`` runs nowhere.

Styles may be inline (``'unsafe-inline'`` for ``style-src``): plotly.js writes its stylesheet
into a ``<style>`` element at run time, and a few widths (the outcome bars, the interval bars of
the registry's comparison) are ``style=`` attributes. CSS cannot run script; the directives that
matter against script injection are ``script-src``, ``object-src`` and ``base-uri``.

Websockets go to this origin only: ``connect-src 'self'`` plus the same host over ``ws:``/``wss:``
(CSP Level 3 counts those as 'self'; older browsers need them named).
"""
from __future__ import annotations

import secrets
from typing import Callable

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
REPORT_ONLY_HEADER = "Content-Security-Policy-Report-Only"


def policy(*, nonce: str, host: str) -> str:
    """The policy for one response.

    >>> policy(nonce="abc", host="temper.example.com").split("; ")[:2]
    ["default-src 'self'", "script-src 'self' 'nonce-abc'"]
    """
    sockets = f" ws://{host} wss://{host}" if host else ""
    return "; ".join([
        "default-src 'self'",
        f"script-src 'self' 'nonce-{nonce}'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        f"connect-src 'self'{sockets}",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ])


class ContentSecurityPolicyMiddleware:
    """Gives each request a fresh nonce (``request.csp_nonce``) and each response the policy
    (``TEMPER_CSP``; ``TEMPER_CSP_REPORT_ONLY`` sends it to be reported, not enforced). A
    response that already has a policy keeps it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.csp_nonce = secrets.token_urlsafe(16)
        response = self.get_response(request)
        if not settings.TEMPER_CSP:
            return response
        header = REPORT_ONLY_HEADER if settings.TEMPER_CSP_REPORT_ONLY else HEADER
        if header not in response:
            response[header] = policy(nonce=request.csp_nonce, host=_host(request))
        return response


def _host(request: HttpRequest) -> str:
    """The host the page was asked for, as ALLOWED_HOSTS let it through ("" when it did not:
    that request is answered 400 anyway)."""
    try:
        return request.get_host()
    except DisallowedHost:  # the response is Django's 400; 'self' alone is enough there
        return ""


def context(request: HttpRequest) -> dict:
    """``{{ csp_nonce }}`` for templates: ``<script nonce="{{ csp_nonce }}">``."""
    return {"csp_nonce": getattr(request, "csp_nonce", "")}
