"""What the compose test builds before the stack: base images from Debian packages and a wheelhouse.

No container registry is reachable from the build machines, so the images docker-compose.yml
names (``debian:bookworm-slim`` for Temper's Dockerfile, ``postgres:15``, ``redis:7``) are made
here from Debian packages (debootstrap, then ``docker import``, as workers/sandbox/image.py
makes the sandbox image) and handed to the build and to compose as variables. The Python
packages come from a wheelhouse built on this machine (its pip reaches files the build cannot)
and served to the build over HTTP on the host's loopback (the build runs with the host's
network). Each is cached by a hash of its recipe, so a second run builds nothing.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = Path(os.environ.get("TEMPER_DEPLOY_CACHE", "/var/tmp/temper-deploy"))
"""Root filesystems, debootstrap's package cache and wheelhouses, kept between runs."""
SUITE = "bookworm"
RECIPE_VERSION = "1"
"""Bump when the recipe below changes in a way the hashed inputs do not show."""


@dataclass(frozen=True)
class BaseImage:
    """One image made from Debian packages: debootstrap minbase + packages + a few image settings."""

    name: str
    """Repository name of the image (the tag is the recipe's hash)."""
    packages: tuple[str, ...]
    """Debian packages installed on top of minbase."""
    changes: tuple[str, ...] = ()
    """Dockerfile instructions applied by ``docker import`` (ENV, WORKDIR, ENTRYPOINT, CMD)."""
    files: tuple[tuple[str, str], ...] = ()
    """(file under tests/deploy/base, path in the image) copied in, executable."""
    remove: tuple[str, ...] = ()
    """Paths removed from the root filesystem after the packages are installed."""

    def digest(self) -> str:
        h = hashlib.sha256(f"{RECIPE_VERSION}|{SUITE}|{self.packages}|{self.changes}|{self.remove}".encode())
        for src, dest in self.files:
            h.update(dest.encode() + (HERE / "base" / src).read_bytes())
        return h.hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"{self.name}:{self.digest()}"


DEBIAN = BaseImage("temper-ci-debian", (), ("CMD [\"bash\"]",))
"""Stands in for debian:bookworm-slim (what Temper's Dockerfile starts from)."""
POSTGRES = BaseImage(
    "temper-ci-postgres", ("postgresql-15",),
    ("ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
     "ENV PGDATA=/var/lib/postgresql/data", 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]', "EXPOSE 5432"),
    (("postgres-entrypoint.sh", "usr/local/bin/docker-entrypoint.sh"),),
    ("var/lib/postgresql/15", "etc/postgresql/15"))
"""Stands in for postgres:15 (the cluster Debian's package made at install is removed)."""
REDIS = BaseImage(
    "temper-ci-redis", ("redis-server",),
    ("WORKDIR /data", 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]', 'CMD ["redis-server"]', "EXPOSE 6379"),
    (("redis-entrypoint.sh", "usr/local/bin/docker-entrypoint.sh"),))
"""Stands in for redis:7 (Debian's 7.0)."""


def _image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def build_base(image: BaseImage) -> str:
    """Build ``image`` unless its tag exists; returns the tag."""
    tag = image.tag
    if _image_exists(tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: apt-get install -y debootstrap")
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f"{image.name}-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--cache-dir={debs}"]
        if image.packages:
            cmd.append("--include=" + ",".join(image.packages))
        done = subprocess.run([*cmd, SUITE, str(rootfs)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap of {image.name} failed:\n{(done.stdout + done.stderr)[-3000:]}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (rootfs / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        for path in image.remove:
            shutil.rmtree(rootfs / path, ignore_errors=True)
        for src, dest in image.files:
            target = rootfs / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(HERE / "base" / src, target)
            target.chmod(0o755)
        changes = [arg for change in image.changes for arg in ("--change", change)]
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", *changes, "-", tag], stdin=tar.stdout, check=True, capture_output=True)
        if tar.wait() != 0:
            raise RuntimeError(f"tar of {rootfs} failed")
    return tag


def wheelhouse(requirements: Path) -> Path:
    """Wheels of every package ``requirements`` resolves to for the image's Python, Debian
    bookworm's python3 (a pip of this machine's /usr/bin/python3, so environment markers such as
    ``python_full_version < "3.11.3"`` resolve as in the image, with this machine's pip
    configuration: the local wheel directory, the mirrors, PyPI), cached by the content."""
    text = requirements.read_bytes()
    for line in text.decode().splitlines():  # nested requirement files are part of the content
        if line.startswith(("-r ", "--requirement ")):
            text += (requirements.parent / line.split(maxsplit=1)[1].strip()).read_bytes()
    python = "/usr/bin/python3"
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    tag = hashlib.sha256(text + version.encode()).hexdigest()[:12]
    out = CACHE / f"wheels-{tag}"
    if (out / ".done").exists():
        return out
    venv = CACHE / "pip-venv"
    if not (venv / "bin" / "pip").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
        # Debian's bundled pip 23.0 builds an sdist with `setup.py bdist_wheel`, which needs `wheel`
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--upgrade", "pip", "wheel"], check=True,
                       capture_output=True)
    out.mkdir(parents=True, exist_ok=True)
    # requirements.txt names PyTorch's CPU index; where that host does not resolve, one retry
    # (pip's default of five costs 7.5 s a project), as the Makefile does
    try:
        socket.getaddrinfo("download.pytorch.org", 443)
        retries = "5"
    except OSError:
        retries = "1"
    done = subprocess.run([str(venv / "bin" / "pip"), "wheel", "-q", "--retries", retries, "-r", str(requirements),
                           "-w", str(out)], cwd=requirements.parent, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip wheel failed:\n{done.stderr[-3000:]}")
    (out / ".done").write_text("ok\n")
    return out


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on the loopback for the build (pip's find-links); yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass
