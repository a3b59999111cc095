"""Channel layer: channels-redis when REDIS_URL is set, otherwise in-memory (one process)."""
from __future__ import annotations

import os

_REDIS = os.environ.get("REDIS_URL", "")

if _REDIS:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [_REDIS]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
