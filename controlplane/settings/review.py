"""Review and judge settings: where the OpenAI-compatible judge endpoints are.

TEMPER_JUDGE_ENDPOINTS is a JSON object of endpoint name -> base URL, e.g.
``{"vllm": "http://vllm:8000/v1"}``. Judge versions name an endpoint, never a URL or a key; the
key is read by the worker from the environment variable the version names.
"""
from __future__ import annotations

import json
import os
import re

from django.core.exceptions import ImproperlyConfigured

try:
    TEMPER_JUDGE_ENDPOINTS: dict[str, str] = json.loads(os.environ.get("TEMPER_JUDGE_ENDPOINTS", "") or "{}")
except ValueError as exc:
    raise ImproperlyConfigured(f"TEMPER_JUDGE_ENDPOINTS: not a JSON object: {exc}") from None
if not isinstance(TEMPER_JUDGE_ENDPOINTS, dict) or not all(isinstance(v, str) for v in TEMPER_JUDGE_ENDPOINTS.values()):
    raise ImproperlyConfigured("TEMPER_JUDGE_ENDPOINTS: must be a JSON object of name -> URL")
TEMPER_JUDGE_WAIT_S = float(os.environ.get("TEMPER_JUDGE_WAIT_S", 60))
"""How long a judge call waits for one of its judge's concurrency slots before it is a judge_error."""
TEMPER_JUDGE_KEY_ENVS: list[str] = [name.strip() for name in
                                    os.environ.get("TEMPER_JUDGE_KEY_ENVS", "TEMPER_JUDGE_KEY_*,OPENAI_API_KEY").split(",")
                                    if name.strip()]
"""Environment variables a judge version may name as its ``api_key_env``: exact names, or
prefixes ending in ``*`` (a name must add at least one character to a prefix). ``{TEAM}`` stands
for the judge's team (its slug upper-cased, ``-`` as ``_``): ``TEMPER_JUDGE_KEY_{TEAM}_*`` gives
each team keys no other team's judge may name; global judges match only entries without it. The
server's own secrets (SECRET_KEY, DATABASE_URL, REDIS_URL, any DJANGO_* and any other TEMPER_*
variable) are refused whatever this list says."""
for _name in TEMPER_JUDGE_KEY_ENVS:
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*(\{TEAM\}[A-Z0-9_]*)?\*?", _name):
        raise ImproperlyConfigured(f"TEMPER_JUDGE_KEY_ENVS: {_name!r} is not a variable name or a prefix ending in *"
                                   " (with at most one {TEAM})")
