"""Login throttling: after too many failed sign-ins for one username, or from one client address,
within a window, every sign-in for that username or from that address is refused, the right
password included, until the window ends. A successful sign-in clears its username's count (not
its address's: one good password must not buy another twenty guesses at other accounts).

It sits in the authentication backend, so it holds for every way in that checks a password: the
login page, the admin's login page and any code that calls ``django.contrib.auth.authenticate``.
The API takes no passwords (bearer tokens are 256-bit random secrets, compared by digest).

Counts live in Django's cache (Redis in production, shared by every web process). Windows are
aligned to the clock: an attempt at ``now`` counts in window ``now // TEMPER_LOGIN_WINDOW_S``, one
cache key per (username or address, window). Each attempt is counted (atomically) before its
password is checked and taken back if the password was right, so guesses sent in parallel cannot
slip past the limit; a refusal lasts until its window ends. The limits and the window are
settings (``TEMPER_LOGIN_MAX_FAILURES_PER_USER``, ``TEMPER_LOGIN_MAX_FAILURES_PER_ADDRESS``,
``TEMPER_LOGIN_WINDOW_S``).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

clock: Callable[[], float] = time.time
"""Seconds since the epoch; tests replace it to step past a window without waiting."""


@dataclass(frozen=True)
class Refusal:
    """Why sign-ins are refused now, and for how long."""

    rule: str  # "user" or "address"
    retry_after_s: int

    def message(self) -> str:
        """The sentence the login form shows.

        >>> Refusal("user", 61).message()
        'Too many failed sign-ins for this username. Try again in 2 minutes.'
        >>> Refusal("address", 30).message()
        'Too many failed sign-ins from your address. Try again in 1 minute.'
        """
        who = "for this username" if self.rule == "user" else "from your address"
        minutes = max(1, math.ceil(self.retry_after_s / 60))
        return f"Too many failed sign-ins {who}. Try again in {minutes} minute{'s' if minutes != 1 else ''}."


def client_address(request: HttpRequest | None) -> str:
    """The address the request came from ("" without a request). Behind a proxy the ASGI server
    must put the client's address there (daphne ``--proxy-headers``), or every client shares the
    proxy's address and its limit."""
    if request is None:
        return ""
    return request.META.get("REMOTE_ADDR") or ""


def _window(now: float) -> tuple[int, int]:
    """The current window's index and the seconds left in it."""
    width = settings.TEMPER_LOGIN_WINDOW_S
    index = int(now // width)
    return index, max(1, math.ceil((index + 1) * width - now))


def _key(rule: str, who: str, index: int) -> str:
    digest = hashlib.sha256(who.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"login-failures:{rule}:{digest}:{index}"


def _limits(username: str, address: str) -> list[tuple[str, str, int]]:
    rules = [("user", username, settings.TEMPER_LOGIN_MAX_FAILURES_PER_USER)] if username else []
    if address:
        rules.append(("address", address, settings.TEMPER_LOGIN_MAX_FAILURES_PER_ADDRESS))
    return rules


def refusal(*, username: str, address: str) -> Refusal | None:
    """The refusal in force for this username or address, or None when either may try."""
    index, left = _window(clock())
    for rule, who, limit in _limits(username, address):
        if (cache.get(_key(rule, who, index)) or 0) >= limit:
            return Refusal(rule, left)
    return None


def _incr(key: str) -> int:
    # Kept a little past the window's end, for a clock slightly behind the cache's.
    expiry = settings.TEMPER_LOGIN_WINDOW_S * 2
    cache.add(key, 0, timeout=expiry)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=expiry)
        return 1


@dataclass(frozen=True)
class Attempt:
    """One sign-in, counted as a failure against its username and address before the password
    is checked: guesses sent in parallel each take a count first, so no more than the limit ever
    reach the password check. ``succeeded()`` takes the counts back for a good password."""

    username: str
    address: str
    window: int
    refusal: Refusal | None
    """Set when the username or the address was already at its limit: the password is not checked."""

    @classmethod
    def begin(cls, *, username: str, address: str) -> "Attempt":
        index, left = _window(clock())
        refused = None
        for rule, who, limit in _limits(username, address):
            if _incr(_key(rule, who, index)) > limit and refused is None:
                refused = Refusal(rule, left)
        return cls(username, address, index, refused)

    def succeeded(self) -> None:
        """A good password: the username's count starts again, and this attempt no longer counts
        against the address (many people may sign in from one office's address)."""
        cache.delete(_key("user", self.username, self.window))
        if self.address:
            try:
                cache.decr(_key("address", self.address, self.window))
            except ValueError:  # the window's count expired meanwhile
                pass


class ThrottledModelBackend(ModelBackend):
    """Django's ModelBackend, refusing a username or address over its limit first."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None
        attempt = Attempt.begin(username=username, address=client_address(request))
        if attempt.refusal is not None:
            raise PermissionDenied  # ends authenticate(): no backend checks the password
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None:
            attempt.succeeded()
        return user
