"""Build the Docker sandbox image locally (no registry is reachable): debootstrap + docker import.

    python -m workers.sandbox.image build [--force]   # idempotent: skips when the image exists
    python -m workers.sandbox.image status
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from workers.sandbox.cli import make_or_status
from workers.sandbox.libs import SANDBOX_LIB, install

IMAGE = os.environ.get("TEMPER_SANDBOX_IMAGE", "temper-sandbox:bookworm-3")
"""Image tag the docker backend runs; bump the suffix when the recipe below changes."""
SUITE = "bookworm"
"""Debian release the root filesystem comes from."""
PACKAGES = ("python3", "git", "python3-pytest")
"""Packages installed on top of the minbase variant (bash comes with it): the shell sessions'
programs (:mod:`workers.sandbox.session`: bash, git, python3, pytest)."""
CACHE_DIR = Path(os.environ.get("TEMPER_SANDBOX_ROOTFS_CACHE", "/var/tmp/temper-rootfs"))
"""Where the debootstrapped root filesystem is kept between builds."""


def _client():
    import docker

    return docker.from_env(timeout=300)


def image_exists(client=None) -> bool:
    """True when IMAGE is present in the local engine."""
    import docker.errors

    client = client or _client()
    try:
        client.images.get(IMAGE)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_rootfs(target: Path) -> Path:
    """debootstrap a minimal Debian with python3 into target/rootfs (cached by a done-marker)."""
    rootfs = target / ("rootfs-" + IMAGE.partition(":")[2])  # one per recipe (the tag changes with it)
    done = rootfs.with_name(rootfs.name + ".done")
    if done.exists():
        return rootfs
    if shutil.which("debootstrap") is None:
        raise SystemExit("debootstrap is not installed: apt-get install -y debootstrap")
    if rootfs.exists():
        shutil.rmtree(rootfs)
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, str(rootfs)],
                   check=True)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        p = rootfs / junk
        if p.exists():
            for child in p.iterdir():
                if child.is_file():
                    child.unlink()
    done.write_text("ok\n")
    return rootfs


def _copy_sandbox_libs(rootfs: Path) -> None:
    """The packages sandboxed programs may import (:mod:`workers.sandbox.libs`, installed first)."""
    source = install()
    inside = rootfs / SANDBOX_LIB.lstrip("/")
    if inside.exists():
        shutil.rmtree(inside)
    inside.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, inside, symlinks=True)


def build(force: bool = False) -> str:
    """Build IMAGE unless it exists; returns the image tag."""
    client = _client()
    if image_exists(client) and not force:
        print(f"image {IMAGE} exists; nothing to do")
        return IMAGE
    rootfs = build_rootfs(CACHE_DIR)
    _copy_sandbox_libs(rootfs)
    work = rootfs / "work"  # tmpfs mounts copy the mode of the directory underneath
    work.mkdir(exist_ok=True)
    os.chmod(work, 0o1777)
    with tempfile.NamedTemporaryFile(suffix=".tar", dir=CACHE_DIR) as tar:
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", tar.name, "."], check=True)
        repo, _, tag = IMAGE.partition(":")
        client.api.import_image_from_file(
            tar.name, repository=repo, tag=tag or "latest",
            changes=["USER 65534:65534", "WORKDIR /work", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                     'CMD ["sleep", "infinity"]'],
        )
    print(f"built image {IMAGE}")
    return IMAGE


def main(argv: list[str] | None = None) -> int:
    """``build [--force]`` or ``status`` (see the module docstring)."""
    return make_or_status(argv, prog="python -m workers.sandbox.image", verb="build",
                          verb_help="build the sandbox image unless it exists",
                          force_help="rebuild even when the image exists", make=build,
                          status_help="print whether the image exists", present=image_exists, label=IMAGE,
                          words=("present", "missing"))

if __name__ == "__main__":
    sys.exit(main())
