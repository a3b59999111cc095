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


IMAGE_PYTHON = "3.11"
"""The python3 of Debian bookworm, the image's interpreter (Dockerfile): what the wheels are for."""
PYTHON = os.environ.get("TEMPER_DEPLOY_PYTHON", "/usr/bin/python3")
"""The interpreter whose pip builds the wheelhouse: this machine's Debian python3 by default."""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """``cmd``'s exit status and output; a missing program reads as exit status 127, never raises."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, **kw)
    except OSError as e:  # the program (or its script's interpreter) is missing, not executable
        return subprocess.CompletedProcess(cmd, 127, "", f"{cmd[0]}: {e}")


def _probe(python: str) -> str:
    """What identifies ``python``'s installation: its version and base prefix (the same for a venv
    of it). A clear error where it is missing or is not the image's Python."""
    done = _run([python, "-c", "import sys; print(sys.version.split()[0], sys.base_prefix, sep='|')"])
    if done.returncode != 0:
        raise RuntimeError(f"the wheelhouse needs {python} (Debian bookworm's python3, the image's Python; "
                           f"TEMPER_DEPLOY_PYTHON names another): {(done.stdout + done.stderr).strip()[-500:]}")
    ident = done.stdout.strip()
    if not ident.startswith(IMAGE_PYTHON + "."):
        raise RuntimeError(f"{python} is Python {ident.split('|')[0]}, the image's is {IMAGE_PYTHON} (Debian "
                           f"bookworm): its wheels would not install there; set TEMPER_DEPLOY_PYTHON to a "
                           f"python{IMAGE_PYTHON}")
    return ident


def _pip_works(venv_python: Path, ident: str) -> bool:
    """Whether ``venv_python`` is a virtual environment of the interpreter ``ident`` names, with a
    pip that runs and ``wheel`` (Debian's pip 23.0 builds an sdist with ``setup.py bdist_wheel``)."""
    check = ("import sys, pip, wheel; assert sys.prefix != sys.base_prefix; "
             "print(sys.version.split()[0], sys.base_prefix, sep='|')")
    done = _run([str(venv_python), "-c", check])
    return (done.returncode == 0 and done.stdout.strip() == ident
            and _run([str(venv_python), "-m", "pip", "--version"]).returncode == 0)


def pip_command(python: str = PYTHON) -> list[str]:
    """``python -m pip`` of a virtual environment of ``python`` kept under CACHE (pip and wheel
    up to date), made again whenever it is not whole: a venv left half-made by an interrupted run
    (``bin/pip`` gone while pip's package stays, where ``python -m venv`` then installs no pip and
    still exits 0), one made by another interpreter or from a python whose ``ensurepip`` is
    absent (Debian without python3-venv: then pip comes from the pip running these tests, through
    its ``--python``). Never its ``bin/pip`` script, whose interpreter line may be stale."""
    ident = _probe(python)
    venv = CACHE / "pip-venv"
    venv_python = venv / "bin" / "python"
    if (venv / ".temper-ok").is_file() and (venv / ".temper-ok").read_text() == ident and \
            _pip_works(venv_python, ident):
        return [str(venv_python), "-m", "pip"]
    CACHE.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(venv, ignore_errors=True)
    errors = []
    made = _run([python, "-m", "venv", "--clear", str(venv)])
    if made.returncode != 0 or _run([str(venv_python), "-m", "pip", "--version"]).returncode != 0:
        errors.append(f"{python} -m venv: exit {made.returncode}: {(made.stdout + made.stderr).strip()[-800:]}")
        shutil.rmtree(venv, ignore_errors=True)
        made = _run([python, "-m", "venv", "--clear", "--without-pip", str(venv)])
        if made.returncode != 0:
            raise RuntimeError(f"{python} cannot make a virtual environment at {venv}:\n" + "\n".join(
                [*errors, (made.stdout + made.stderr).strip()[-800:]]))
        boot = _run([sys.executable, "-m", "pip", "--python", str(venv_python), "install", "-q", "pip", "wheel"])
        if boot.returncode != 0:
            errors.append(f"pip of {sys.executable} --python {venv_python}: exit {boot.returncode}: "
                          f"{boot.stderr.strip()[-800:]}")
    up = _run([str(venv_python), "-m", "pip", "install", "-q", "--upgrade", "pip", "wheel"])
    if up.returncode != 0:
        errors.append(f"pip install --upgrade pip wheel: exit {up.returncode}: {up.stderr.strip()[-800:]}")
    if not _pip_works(venv_python, ident):
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(f"no working pip (with wheel) in a virtual environment of {python} at {venv}:\n"
                           + "\n".join(errors or ["(pip installed nothing)"]))
    (venv / ".temper-ok").write_text(ident)
    return [str(venv_python), "-m", "pip"]


BUILD_BACKENDS = ("setuptools", "wheel")
"""What pip builds the locks' source-only packages with (cellpylib, pycosat, zss: setup.py, no
pyproject.toml) inside the image build, where the wheelhouse is the only index."""


def wheelhouse(locked: tuple[Path, ...], unlocked: tuple[Path, ...] = ()) -> Path:
    """The exact files the lock files ``locked`` name (``pip download --no-deps --require-hashes``:
    wheels, and the source archives of the packages that publish only those, each matching its
    locked sha256, so the image's hash-checked install accepts them), the build backends of those
    source archives, and the binary wheels of ``unlocked`` (requirements/sandbox.txt, pinned, no
    hashes). A pip of the image's Python, Debian bookworm's python3 (this machine's /usr/bin/python3,
    so wheels are chosen as in the image), with this machine's pip configuration (the local wheel
    directory, the mirrors, PyPI); cached by the content of the files."""
    h = hashlib.sha256(_probe(PYTHON).encode() + repr(BUILD_BACKENDS).encode())
    for path in (*locked, *unlocked):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    out = CACHE / f"wheels-{h.hexdigest()[:12]}"
    if (out / ".done").exists():
        return out
    pip = pip_command()
    out.mkdir(parents=True, exist_ok=True)
    # the CPU locks name PyTorch's CPU index; where that host does not resolve, no retry (pip's
    # default of five costs 7.5 s a project, and each retry a warning), as the Makefile does
    try:
        socket.getaddrinfo("download.pytorch.org", 443)
        retries = "5"
    except OSError:
        retries = "0"
    files = [arg for path in locked for arg in ("-r", str(path))]
    steps = [(["--no-deps", "--require-hashes", *files], "the lock files"),
             (list(BUILD_BACKENDS), "the build backends")]
    steps += [(["--no-deps", "--only-binary=:all:", "-r", str(path)], path.name) for path in unlocked]
    for args, what in steps:
        done = _run([*pip, "download", "-q", "--retries", retries, "-d", str(out), *args], cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"pip download of {what} failed:\n{done.stderr[-3000:]}")
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
