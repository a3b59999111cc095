"""The Redis channel layer, made to outlive Redis: a socket's receive loop waits out an outage.

channels-redis raises from ``receive`` when Redis is unreachable, and Channels then ends the
consumer, so every open socket was closed by a Redis restart. Here ``receive`` retries with backoff
instead: the socket stays open, the consumer keeps reading the database (the log, DESIGN.md) on its
own, re-joins its groups once Redis answers again (consumers.py), and wake-ups resume.
"""
from __future__ import annotations

import asyncio
import logging
import time

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

LAYER_ERRORS = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError, asyncio.TimeoutError)
"""What an unreachable Redis raises through channels-redis (and nothing a bug would raise)."""

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0


class RedisChannelLayer(_RedisChannelLayer):
    """channels-redis whose ``receive`` waits for Redis to come back instead of raising, and whose
    ``group_rejoin`` tells a socket that Redis had forgotten it."""

    async def group_rejoin(self, group: str, channel: str) -> bool:
        """``group_add`` (same keys, same expiry) that returns whether ``channel`` had to be added
        back: True means Redis lost the group's entry (it restarted without its data, or was
        flushed), and with it the wake-ups sent since."""
        connection = self.connection(self.consistent_hash(group))
        key = self._group_key(group)
        added = await connection.zadd(key, {channel: time.time()})
        await connection.expire(key, self.group_expiry)
        return bool(added)

    async def receive(self, channel):
        delay = RETRY_FIRST_S
        while True:
            try:
                return await super().receive(channel)
            except LAYER_ERRORS as exc:
                log.warning("channel layer unreachable (%s); receive retries in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
