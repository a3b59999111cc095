"""The swe-pkg pins: sdists downloaded once, checked against their SHA-256, read as text trees."""
from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from trainer.families.pkgs import pins


def make_sdist(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()


SDIST = make_sdist({"demo-1.0/demo/__init__.py": b"X = 1\n", "demo-1.0/tests/test_demo.py": b"def test(): pass\n",
                    "demo-1.0/demo/data.bin": b"\x00\x01", "demo-1.0/demo.egg-info/PKG-INFO": b"Name: demo\n",
                    "demo-1.0/latin.txt": "caf\xe9".encode("latin-1"), "../evil.py": b"x = 1\n"})


@pytest.fixture
def local_pin(tmp_path, monkeypatch):
    """A pin named ``demo`` whose URL is a local file, downloads going to ``tmp_path``."""
    source = tmp_path / "demo-1.0.tar.gz"
    source.write_bytes(SDIST)
    monkeypatch.setenv("TEMPER_VAR_DIR", str(tmp_path / "var"))

    def pin(sha256: str) -> pins.Pin:
        made = pins.Pin("demo", "1.0", "demo-1.0.tar.gz", source.as_uri(), sha256)
        monkeypatch.setitem(pins.PINS, "demo", made)
        pins._tree.cache_clear()
        return made
    yield pin
    pins._tree.cache_clear()


def test_tree_holds_the_text_files_under_the_top_folder(local_pin, tmp_path):
    local_pin(hashlib.sha256(SDIST).hexdigest())
    assert pins.source_tree("demo") == {"demo/__init__.py": "X = 1\n", "tests/test_demo.py": "def test(): pass\n"}
    assert (tmp_path / "var" / "pkgs" / "sdists" / "demo-1.0.tar.gz").read_bytes() == SDIST


def test_a_hash_mismatch_is_refused(local_pin, tmp_path):
    local_pin("0" * 64)
    with pytest.raises(pins.PinError, match="SHA-256 .* refused"):
        pins.source_tree("demo")
    assert not (tmp_path / "var" / "pkgs" / "sdists" / "demo-1.0.tar.gz").exists()


def test_a_cached_file_that_changed_is_downloaded_again(local_pin, tmp_path):
    local_pin(hashlib.sha256(SDIST).hexdigest())
    cached = tmp_path / "var" / "pkgs" / "sdists" / "demo-1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"tampered")
    assert pins.source_tree("demo")["demo/__init__.py"] == "X = 1\n"
    assert cached.read_bytes() == SDIST


def test_unknown_package_is_refused():
    with pytest.raises(pins.PinError, match="no pinned package"):
        pins.source_tree("no-such-package")


def test_pins_are_complete():
    assert len(pins.PINS) >= 12
    for pin in pins.PINS.values():
        assert len(pin.sha256) == 64 and pin.url.startswith("https://files.pythonhosted.org/") and pin.url.endswith(pin.filename)


def test_paths_are_classified():
    assert pins.is_test_path("src/pkg/tests/data/x.json") and pins.is_test_path("testing/helpers.py")
    assert not pins.is_source_path("src/pkg/tests/helpers.py") and not pins.is_source_path("setup.py")
    assert pins.is_source_path("src/pkg/core.py") and pins.is_source_path("six.py")
    assert not pins.is_source_path("docs/conf.py") and not pins.is_source_path("pkg/data.json")


def test_a_real_pin_downloads_and_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPER_VAR_DIR", str(tmp_path))
    pins._tree.cache_clear()
    try:
        tree = pins.source_tree("inflection")
    finally:
        pins._tree.cache_clear()
    assert "inflection/__init__.py" in tree and "test_inflection.py" in tree
    assert hashlib.sha256((tmp_path / "pkgs" / "sdists" / "inflection-0.5.1.tar.gz").read_bytes()).hexdigest() == pins.PINS["inflection"].sha256
