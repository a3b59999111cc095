"""Channel layer: channels-redis when REDIS_URL is set, otherwise in-memory (one process)."""
from __future__ import annotations

import os

_REDIS = os.environ.get("REDIS_URL", "")

if _REDIS:
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis whose receive waits out a Redis outage (the socket stays open).
            "BACKEND": "controlplane.live.layers.RedisChannelLayer",
            "CONFIG": {"hosts": [_REDIS]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

TEMPER_LIVE_POLL_S = float(os.environ.get("TEMPER_LIVE_POLL_S", 5))
if not 0 < TEMPER_LIVE_POLL_S <= 3600:
    raise ValueError(f"TEMPER_LIVE_POLL_S: must be a number of seconds in (0, 3600], not {TEMPER_LIVE_POLL_S!r}")
"""With Redis, how often a live socket re-joins its groups and reads the database for rows no
wake-up announced (Redis restarted or lost its data): the most a client waits after such a loss.
(With the in-memory layer the sockets read the database every second: workers cannot wake them.)"""
