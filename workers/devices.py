"""What accelerators this worker's host has, for its heartbeat: ``nvidia-smi``'s list (index, name,
memory), read without touching CUDA (a prefork worker must not initialise CUDA before it forks);
none where there is no NVIDIA driver."""
from __future__ import annotations

import shutil
import subprocess

QUERY = ["--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"]


def parse_nvidia_smi(text: str) -> list[dict]:
    """``index, name, memory MiB`` lines as devices; lines that do not parse are skipped.

    >>> parse_nvidia_smi("0, NVIDIA H200, 143771\\n1, NVIDIA H200, 143771\\n")
    [{'index': 0, 'name': 'NVIDIA H200', 'memory_gib': 140.4}, {'index': 1, 'name': 'NVIDIA H200', 'memory_gib': 140.4}]
    >>> parse_nvidia_smi("No devices were found")
    []
    """
    devices = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            devices.append({"index": int(parts[0]), "name": parts[1], "memory_gib": round(int(parts[2]) / 1024, 1)})
        except ValueError:
            continue
    return devices


def device_inventory(timeout_s: float = 10.0) -> list[dict]:
    """This host's NVIDIA GPUs, or ``[]``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else []
