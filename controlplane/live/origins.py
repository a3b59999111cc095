"""The websocket handshake's origin check, matched exactly against ``ALLOWED_HOSTS``.

Channels' ``OriginValidator`` reads the host of an ``Origin`` with ``urlparse`` and compares only
that: ``http://127.0.0.1:8301.evil.example`` has the host ``127.0.0.1`` (the rest is taken for a
port, which is never checked when an allowed host names no scheme), so it passed as the site's
own. Here an origin is an ``http`` or ``https`` URL of a host and, optionally, a numeric port,
and nothing else (no user, path, query or fragment); what is not is refused before the host is
compared.
"""
from __future__ import annotations

from channels.security.websocket import OriginValidator
from django.conf import settings


class ExactOriginValidator(OriginValidator):
    """Channels' origin check on an origin that is well formed (scheme, host, numeric port)."""

    def valid_origin(self, parsed_origin) -> bool:
        if parsed_origin is not None and not well_formed(parsed_origin):
            return False
        return super().valid_origin(parsed_origin)


def well_formed(parsed) -> bool:
    """Whether a parsed ``Origin`` is ``scheme://host[:port]`` with a numeric port.

    >>> from urllib.parse import urlparse
    >>> [well_formed(urlparse(o)) for o in ("http://localhost:8301", "https://example.com", "http://[::1]:80")]
    [True, True, True]
    >>> [well_formed(urlparse(o)) for o in ("http://127.0.0.1:8301.evil.example", "http://u@localhost", "ftp://localhost",
    ...                                     "http://localhost/x", "http://localhost:99999")]
    [False, False, False, False, False]
    """
    try:
        parsed.port  # raises on a port that is not a number from 0 to 65535
    except ValueError:
        return False
    return (parsed.scheme in ("http", "https") and bool(parsed.hostname) and parsed.username is None
            and parsed.password is None and parsed.path in ("", "/") and not parsed.query and not parsed.fragment
            and not parsed.params)


def allowed_hosts_origin_validator(application):
    """``application`` behind the exact origin check, allowing ``ALLOWED_HOSTS`` (Channels' own
    factory, with the exact check)."""
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return ExactOriginValidator(application, allowed)
