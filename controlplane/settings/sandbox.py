"""Sandbox settings. The runtime (workers/sandbox, which never imports Django) reads the same
environment variables itself; these mirror them for the control plane's pages and checks."""
from __future__ import annotations

import os
import shutil

SANDBOX_BACKEND = os.environ.get("TEMPER_SANDBOX_BACKEND") or ("bwrap" if shutil.which("bwrap") else "docker")
SANDBOX_IMAGE = os.environ.get("TEMPER_SANDBOX_IMAGE", "temper-sandbox:bookworm-2")
