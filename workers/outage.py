"""A run held through an outage of a service it needs (the broker, the database), for up to its
collective timeout.

A driver's calls to a service go through a :class:`Hold`: a call the service refuses because it
is unreachable is tried again, backing off from 0.5 s to 5 s, until it is answered or the outage
(one for every thread that calls) has lasted ``hold_s``; then :class:`Unreachable` (the service's
subclass) is raised and the driver pauses the run naming the service. Any other error is the
caller's. ``on_wait(note)`` hears the outage begin and go on (a sentence for the "Waiting on"
panel) and end (``None``). ``workers/broker.py`` holds sends (``HeldSend``); :class:`HeldDatabase`
holds the driver's reads and writes of its run's rows.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from django.db import InterfaceError, OperationalError, connections

log = logging.getLogger(__name__)


class Unreachable(RuntimeError):
    """Calls have failed for longer than the run may hold: the cause and for how long."""

    service = "service"

    def __init__(self, waited_s: float, hold_s: float, cause: BaseException):
        super().__init__(f"the {self.service} has been unreachable for {waited_s:.0f} s (the run holds for "
                         f"parallel.collective_timeout_s = {hold_s:g} s): {cause}")
        self.waited_s, self.hold_s, self.cause = waited_s, hold_s, cause


class Hold:
    """Calls to one service that hold the run through its outage (module docstring)."""

    service = "service"
    retried = "calls are retried"
    unreachable_error: type[Unreachable] = Unreachable

    def __init__(self, *, hold_s: float, on_wait: Callable[[str | None], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.hold_s, self.on_wait = hold_s, on_wait
        self.clock, self.sleep = clock, sleep
        self.since: float | None = None
        """When the current outage began (by ``clock``), None while the service answers."""
        self.outages = 0
        self.ended: float | None = None
        """When the last outage ended (by ``clock``), None before any."""
        self._lock = threading.Lock()

    def ended_within(self, seconds: float) -> bool:
        """Whether an outage ended less than ``seconds`` ago (what it stopped may still look stale)."""
        return self.ended is not None and self.clock() - self.ended < seconds

    def is_outage(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the service cannot be reached (anything else is the caller's)."""
        raise NotImplementedError

    def after_failure(self) -> None:
        """Make the next try start afresh (a connection the outage broke is dropped)."""

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        delay = 0.5
        while True:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if not self.is_outage(exc):
                    raise
                self.after_failure()
                waited = self._failed(exc)
                if waited >= self.hold_s:
                    raise self.unreachable_error(waited, self.hold_s, exc) from exc
                self.sleep(min(delay, self.hold_s - waited))
                delay = min(delay * 2, 5.0)
                continue
            self._answered()
            return result

    __call__ = call

    def _failed(self, exc: BaseException) -> float:
        with self._lock:
            now = self.clock()
            if self.since is None:
                self.since = now
                self.outages += 1
                log.warning("the %s is unreachable (%s); holding the run for up to %g s", self.service, exc, self.hold_s)
            waited = now - self.since
        if self.on_wait is not None:
            self.on_wait(f"the {self.service} is unreachable ({str(exc).strip()[:200]}): {self.retried}; "
                         f"{waited:.0f} s of at most {self.hold_s:g} s")
        return waited

    def _answered(self) -> None:
        with self._lock:
            if self.since is None:
                return
            self.ended = self.clock()
            log.warning("the %s answers again after %.1f s", self.service, self.ended - self.since)
            self.since = None
        if self.on_wait is not None:
            self.on_wait(None)


class DatabaseUnreachable(Unreachable):
    service = "database"


class HeldDatabase(Hold):
    """The driver's reads and writes of its run's rows, held through a database outage. Each call
    is one unit that is safe to run again (the step's record is idempotent); the thread's broken
    connection is closed after a failure so the next try connects anew."""

    service = "database"
    retried = "the driver's reads and writes are retried"
    unreachable_error = DatabaseUnreachable

    def is_outage(self, exc: BaseException) -> bool:
        return isinstance(exc, (OperationalError, InterfaceError))

    def after_failure(self) -> None:
        try:
            connections.close_all()  # this thread's connections only
        except Exception:  # noqa: BLE001 - closing a connection to a vanished server may fail too
            log.debug("closing the broken database connection failed", exc_info=True)

    def wait_until_back(self, *, every_s: float = 5.0, stop: threading.Event | None = None) -> float:
        """Block until the database answers again (or ``stop`` is set); returns the seconds waited.
        A run held past ``hold_s`` still needs the database to record its pause."""
        began, delay = self.clock(), 0.5
        while stop is None or not stop.is_set():
            try:
                connections["default"].ensure_connection()
                with connections["default"].cursor() as cursor:
                    cursor.execute("SELECT 1")
                self._answered()
                return self.clock() - began
            except (OperationalError, InterfaceError):
                self.after_failure()
                self.sleep(delay)
                delay = min(delay * 2, every_s)
        return self.clock() - began
