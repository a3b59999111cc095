"""How a worker lives through a broker outage: the reconnection settings and one kombu guard.

A Redis outage (a restart, a failover, a dropped network) must cost a worker nothing but the time
it lasts. Celery reconnects by itself, but with its defaults a worker gives up after 100 broker
retries, a task that finishes while Redis is away loses its result after 20 one-second retries, and
kombu 5.7 (the newest release: there is no fixed version to pin) can turn one leftover of the lost
connection into an unrecoverable error. ``configure(app)`` fixes all three; docs/orchestration.md
("Broker outages") says what an operator sees.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from kombu.exceptions import OperationalError
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

from workers.outage import Hold, Unreachable

log = logging.getLogger(__name__)

RESULT_RETRY_POLICY = {"max_retries": 120, "interval_start": 0, "interval_step": 1, "interval_max": 5}
"""Storing or waiting for a result across an outage: about ten minutes of retries (Celery's own
policy gives up after 20 s, so a 20 s outage failed tasks that had finished their work)."""

REDIS_TRANSPORT_OPTIONS = {"health_check_interval": 10, "socket_keepalive": True}
"""A connection idle for 10 s is checked before use, and TCP keepalive notices a dead peer, so a
worker finds out that Redis went away (and reconnects) instead of waiting on a dead socket."""


class ClosedBrokerConnection(RedisConnectionError):
    """A channel of a broker connection that was already closed tried to talk to Redis."""


def _guard_closed_connection(connparams):
    """Wrap kombu's ``Channel._connparams`` to raise a connection error, not an AttributeError.

    After a connection loss Celery closes the old connection (its transport's ``client`` becomes
    None) and starts a new one, but a channel of the old one can still be asked for a Redis client
    (a late acknowledgement, a bootstep's cleanup). kombu then reads ``self.connection.client``
    or ``conninfo.hostname`` of None: ``AttributeError("'NoneType' object has no attribute
    'hostname'")``, which Celery treats as unrecoverable, and the worker's main process exits
    (seen on the verify worker after a 20 s Redis outage, issue #16). A connection error is what
    this is, and Celery recovers from those (it logs the failed acknowledgement and goes on, the
    message is delivered again later)."""

    @functools.wraps(connparams)
    def guarded(self, *args, **kwargs):
        if self.connection is None or self.connection.client is None:
            raise ClosedBrokerConnection("this channel's broker connection was closed (after a connection loss)")
        return connparams(self, *args, **kwargs)

    guarded.temper_guard = True
    return guarded


def install_kombu_guard() -> None:
    """Apply the guard to kombu's Redis channel (once; the class is kombu's, shared by every
    connection of the process)."""
    if not getattr(kombu_redis.Channel._connparams, "temper_guard", False):
        kombu_redis.Channel._connparams = _guard_closed_connection(kombu_redis.Channel._connparams)


def configure(app) -> None:
    """Settings for surviving broker outages, on top of those from Django's settings."""
    app.conf.update(
        # Retry forever: the default (100 retries) leaves a queue without its worker after a long outage.
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # A finished task's result is stored once Redis is back, instead of the task failing.
        result_backend_always_retry=True,
        result_backend_transport_options={**(app.conf.result_backend_transport_options or {}),
                                          "retry_policy": RESULT_RETRY_POLICY},
    )
    if str(app.conf.broker_url or "").startswith(("redis://", "rediss://")):
        app.conf.broker_transport_options = {**REDIS_TRANSPORT_OPTIONS, **(app.conf.broker_transport_options or {})}
        install_kombu_guard()


SEND_ERRORS = (OperationalError, RedisConnectionError, ConnectionError)
"""What a send raises while the broker is unreachable (kombu wraps most in OperationalError)."""


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the broker (or the result store beside it) cannot be reached: one of
    :data:`SEND_ERRORS`, or Celery's RuntimeError "Retry limit exceeded while trying to reconnect
    to the Celery result store" raised from one (a send subscribes to its result first)."""
    return isinstance(exc, SEND_ERRORS) or (isinstance(exc, RuntimeError) and isinstance(exc.__cause__, SEND_ERRORS))


class BrokerUnreachable(Unreachable):
    """Sends have failed for longer than the run may hold: the cause and for how long."""

    service = "broker"


class HeldSend(Hold):
    """A driver's ``send(name, args)`` that holds the run through a broker outage (workers/outage.py):
    a send the broker refuses is tried again, backing off from 0.5 s to 5 s, for up to ``hold_s``
    seconds since the outage began, then raises :class:`BrokerUnreachable`. ``on_wait(note)`` hears
    the outage begin and go on (a sentence for the "Waiting on" panel) and end (``None``). Several
    threads may send at once (a run verifies each domain on a thread of its own); the outage is
    one for all."""

    service = "broker"
    retried = "sends are retried"
    unreachable_error = BrokerUnreachable

    def __init__(self, send: Callable[[str, tuple], Any], **kwargs: Any):
        super().__init__(**kwargs)
        self.send = send

    def is_outage(self, exc: BaseException) -> bool:
        return unreachable(exc)

    def __call__(self, name: str, args: tuple) -> Any:
        return self.call(self.send, name, args)
