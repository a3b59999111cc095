"""Sandbox settings: which backend the verify workers use and the global concurrency limit."""
from __future__ import annotations

import os
import shutil

SANDBOX_BACKEND = os.environ.get("TEMPER_SANDBOX_BACKEND") or ("bwrap" if shutil.which("bwrap") else "docker")
SANDBOX_IMAGE = os.environ.get("TEMPER_SANDBOX_IMAGE", "temper-sandbox:latest")
SANDBOX_MAX_CONCURRENT = int(os.environ.get("TEMPER_SANDBOX_MAX_CONCURRENT", 8))
