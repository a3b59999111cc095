"""plotly.js's basic bundle, fetched at install time so that a first visit compiles 1.1 MB of
JavaScript instead of the 4.8 MB the ``plotly`` Python package ships.

Temper's charts are scatter traces only (lines and markers, shapes for events, log and date axes,
``Plotly.react`` and ``Plotly.downloadImage``), all in plotly.js's ``basic`` partial bundle
(scatter, bar, pie and the core). Plotly publishes that bundle prebuilt on the npm registry as
``plotly.js-basic-dist-min``; no Node build is involved. ``python -m controlplane.web.vendor fetch``
(run by ``make install`` and ``make demo``) downloads the pinned version's tarball, checks it
against the registry's sha512 integrity and the file's sha256 pinned here, and writes the one file
to ``frontend/vendor/plotly-basic/``. Pages then load it (``settings.TEMPER_PLOTLY_JS``); where it
was never fetched (no registry, an image built offline) they load the full bundle from the
``plotly`` package instead, so nothing breaks: the first visit is only slower.

The pinned version is the plotly.js the pinned ``plotly`` package ships (v3.7.0 in plotly 6.9), so
both bundles draw the same charts.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import os
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
VENDOR_DIR = BASE_DIR / "frontend" / "vendor"
REGISTRY = os.environ.get("TEMPER_NPM_REGISTRY", "https://registry.npmjs.org").rstrip("/")
MAX_TARBALL_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Bundle:
    package: str
    version: str
    member: str  # the file's path inside the tarball
    integrity: str  # the registry's sha512 of the tarball, as npm's lock files write it
    sha256: str  # of the file itself, checked again whenever it is on disk
    folder: str  # under frontend/vendor, served as static/vendor/<folder>/ (STATICFILES_DIRS)

    @property
    def directory(self) -> Path:
        return VENDOR_DIR / self.folder

    @property
    def path(self) -> Path:
        return self.directory / Path(self.member).name

    @property
    def static_prefix(self) -> str:
        return f"vendor/{self.folder}"

    @property
    def static_path(self) -> str:
        return f"{self.static_prefix}/{Path(self.member).name}"

    @property
    def url(self) -> str:
        return f"{REGISTRY}/{self.package}/-/{self.package}-{self.version}.tgz"


PLOTLY_BASIC = Bundle(
    package="plotly.js-basic-dist-min",
    version="3.7.0",
    member="package/plotly-basic.min.js",
    integrity="sha512-84KPQhLTrO5IHu6DCte2KwA4bzSoVIdIs3uDPWid3sgeTX8L5RjpDARjCG3spgOwQ8MYE8PL+MeQ0DQRWA1Emw==",
    sha256="c23b03591a6bdad0bd0f47a0c5c52305a5519812b73ce254be65cd841553c9c2",
    folder="plotly-basic",
)
FULL_BUNDLE = "vendor/plotly/plotly.min.js"
"""The ``plotly`` package's own full bundle (``STATICFILES_DIRS`` entry ``vendor/plotly``)."""


class FetchError(RuntimeError):
    pass


def is_fetched(bundle: Bundle | None = None) -> bool:
    """The bundle is on disk with the pinned content (a truncated or other file does not count)."""
    bundle = bundle or PLOTLY_BASIC
    try:
        return hashlib.sha256(bundle.path.read_bytes()).hexdigest() == bundle.sha256
    except OSError:
        return False


def plotly_js() -> str:
    """The static path pages load plotly.js from: the basic bundle when fetched, else the full one."""
    return PLOTLY_BASIC.static_path if is_fetched(PLOTLY_BASIC) else FULL_BUNDLE


def unpack(tarball: bytes, bundle: Bundle) -> bytes:
    """The bundle's file out of its tarball, after both checks; FetchError says which failed."""
    algo, _, expected = bundle.integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, tarball).digest()).decode()
    if got != expected:
        raise FetchError(f"{bundle.package}@{bundle.version}: the tarball's {algo} is {got}, not the pinned {expected}")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        try:
            member = tar.getmember(bundle.member)
        except KeyError:
            raise FetchError(f"{bundle.package}@{bundle.version}: no {bundle.member} in the tarball") from None
        if not member.isfile():
            raise FetchError(f"{bundle.package}@{bundle.version}: {bundle.member} is not a plain file")
        data = tar.extractfile(member).read()
    if hashlib.sha256(data).hexdigest() != bundle.sha256:
        raise FetchError(f"{bundle.package}@{bundle.version}: {bundle.member} does not match its pinned sha256")
    return data


def download(url: str, *, timeout_s: float, limit: int = MAX_TARBALL_BYTES) -> bytes:
    """The body at ``url``, read within ``timeout_s`` in all (a server trickling bytes does not hold
    an install for longer) and at most ``limit`` bytes; FetchError otherwise."""
    deadline = time.monotonic() + timeout_s
    chunks, size = [], 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            while chunk := response.read(64 * 1024):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise FetchError(f"{url}: larger than {limit} bytes")
                if time.monotonic() > deadline:
                    raise FetchError(f"{url}: not downloaded within {timeout_s:g} s")
    except OSError as e:
        raise FetchError(f"{url}: {e}") from None
    return b"".join(chunks)


def fetch(bundle: Bundle | None = None, *, timeout_s: float = 60.0) -> Path:
    """Download, check and write the bundle; a no-op when the right file is already there."""
    bundle = bundle or PLOTLY_BASIC
    if is_fetched(bundle):
        return bundle.path
    data = unpack(download(bundle.url, timeout_s=timeout_s), bundle)
    tmp = bundle.path.with_name(bundle.path.name + ".part")
    try:
        bundle.directory.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)  # never written through: a link planted there is removed, not followed
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, bundle.path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise FetchError(f"{bundle.path}: {e}") from None
    return bundle.path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controlplane.web.vendor", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "status"])
    parser.add_argument("--optional", action="store_true",
                        help="a failed fetch prints why and exits 0: pages then load the full bundle")
    args = parser.parse_args(argv)
    if args.command == "status":
        print(plotly_js())
        return 0
    try:
        path = fetch(PLOTLY_BASIC)
    except FetchError as e:
        print(f"plotly.js basic bundle not fetched ({e}); pages load the full bundle from the plotly package",
              file=sys.stderr)
        return 0 if args.optional else 1
    print(f"{PLOTLY_BASIC.package}@{PLOTLY_BASIC.version}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
