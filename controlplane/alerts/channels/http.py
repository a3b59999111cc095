"""What the channels that POST to a URL share: the URL check when a rule is saved, and the POST."""
from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

from controlplane.alerts import transport
from controlplane.common.errors import FieldError

TIMEOUT_S = 5.0
"""A receiver answers within this or the try fails."""


def url_errors(url: str, path: str) -> list[FieldError]:
    """What is wrong with a delivery URL: http or https, a DNS name or an IP literal as the host,
    no user info; no private or loopback address unless ``TEMPER_ALERT_ALLOW_PRIVATE`` (checked
    again, against what the name resolves to, at each delivery: controlplane/alerts/transport.py)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return [FieldError(path, f"not a URL: {exc}")]
    if parts.scheme not in ("http", "https") or not host:
        return [FieldError(path, "must be an http:// or https:// URL with a host")]
    if parts.username or parts.password:
        return [FieldError(path, "must not carry a user or password (put a token in the path, or use the secret)")]
    if problem := transport.host_error(host):
        return [FieldError(path, problem)]
    literal = transport.ip_literal(host)
    local = host.rstrip(".") == "localhost" or host.rstrip(".").endswith(".localhost")
    if not settings.TEMPER_ALERT_ALLOW_PRIVATE and (local or (literal is not None and not transport.public_ip(literal))):
        return [FieldError(path, f"{host} is a private or loopback address; deliveries go to public hosts "
                                 f"(TEMPER_ALERT_ALLOW_PRIVATE=1 allows private ones)")]
    return []


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    headers = {"Content-Type": "application/json", "User-Agent": "Temper-Alerts/1", **headers}
    return transport.post(url, body, headers, deadline_s=TIMEOUT_S, allow_private=settings.TEMPER_ALERT_ALLOW_PRIVATE)


def shown_url(target: str) -> str:
    """A webhook or Slack URL as someone who may not edit the rule sees it: it is a credential (its
    path often is the token)."""
    parts = urlsplit(target)
    return f"{parts.scheme}://{parts.hostname}/…"
