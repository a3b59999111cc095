"""plotly.js's basic bundle is taken only as pinned: the tarball's sha512 and the file's sha256."""
from __future__ import annotations

import base64
import hashlib
import io
import tarfile

import pytest

from controlplane.web import vendor


def tarball(members: dict[str, bytes], *, symlink: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if symlink:
            info = tarfile.TarInfo(symlink)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


def pinned(tgz: bytes, data: bytes, tmp_path, **changes) -> vendor.Bundle:
    fields = dict(package="p", version="1.0.0", member="package/p.min.js", folder="p",
                  integrity="sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
                  sha256=hashlib.sha256(data).hexdigest())
    return vendor.Bundle(**(fields | changes))


def test_the_pinned_file_comes_out_of_its_tarball(tmp_path):
    data = b"/** plotly */ window.Plotly = {};"
    tgz = tarball({"package/p.min.js": data, "package/LICENSE": b"MIT"})
    assert vendor.unpack(tgz, pinned(tgz, data, tmp_path)) == data


@pytest.mark.parametrize("case", ["other tarball", "other file", "missing member", "symlink member"])
def test_anything_but_the_pinned_content_is_refused_with_the_reason(tmp_path, case):
    data = b"/** plotly */"
    tgz = tarball({"package/p.min.js": data})
    bundle = pinned(tgz, data, tmp_path)
    if case == "other tarball":  # a registry (or a proxy) serving something else under the same name
        tgz = tarball({"package/p.min.js": b"alert(1)"})
        match = "sha512"
    elif case == "other file":  # the right tarball pinned with another file's hash
        bundle = pinned(tgz, b"another", tmp_path)
        match = "sha256"
    elif case == "missing member":
        tgz = tarball({"package/q.min.js": data})
        bundle = pinned(tgz, data, tmp_path)
        match = "no package/p.min.js"
    else:
        tgz = tarball({}, symlink="package/p.min.js")
        bundle = pinned(tgz, data, tmp_path)
        match = "not a plain file"
    with pytest.raises(vendor.FetchError, match=match):
        vendor.unpack(tgz, bundle)


def test_a_file_on_disk_counts_only_with_the_pinned_content(tmp_path, monkeypatch):
    monkeypatch.setattr(vendor, "VENDOR_DIR", tmp_path)
    data = b"/** plotly */"
    bundle = pinned(b"", data, tmp_path)
    assert not vendor.is_fetched(bundle)
    bundle.path.parent.mkdir(parents=True)
    bundle.path.write_bytes(data[:-2])  # a fetch cut short
    assert not vendor.is_fetched(bundle)
    bundle.path.write_bytes(data)
    assert vendor.is_fetched(bundle)
    assert vendor.fetch(bundle) == bundle.path  # already there: nothing is downloaded


def test_an_unreachable_registry_says_so_and_pages_keep_the_full_bundle(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vendor, "VENDOR_DIR", tmp_path)
    monkeypatch.setattr(vendor, "REGISTRY", "http://127.0.0.1:9")  # the discard port: refused at once
    bundle = vendor.Bundle(**{**vendor.PLOTLY_BASIC.__dict__})
    monkeypatch.setattr(vendor, "PLOTLY_BASIC", bundle)
    assert vendor.plotly_js() == vendor.FULL_BUNDLE
    with pytest.raises(vendor.FetchError, match="127.0.0.1:9"):
        vendor.fetch(bundle, timeout_s=5)
    assert vendor.main(["fetch", "--optional"]) == 0
    assert "pages load the full bundle" in capsys.readouterr().err
    assert vendor.main(["fetch"]) == 1
    assert not bundle.path.exists()


def _serve(handler_body):
    """A local HTTP server whose GET runs ``handler_body(handler)``; returns (server, url)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            handler_body(self)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_trickling_or_oversized_download_is_cut_off_and_a_blocked_folder_is_a_fetch_error(tmp_path, monkeypatch):
    import threading

    release = threading.Event()

    def trickle(h):  # headers, one byte, then nothing until the test ends
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.write(b"x")
        h.wfile.flush()
        release.wait(30)

    server, url = _serve(trickle)
    try:
        with pytest.raises(vendor.FetchError, match="timed out|within"):
            vendor.download(url, timeout_s=1)
    finally:
        release.set()
        server.shutdown()

    def big(h):
        h.send_response(200)
        h.end_headers()
        h.wfile.write(b"0" * 5000)

    server, url = _serve(big)
    try:
        with pytest.raises(vendor.FetchError, match="larger than 4096 bytes"):
            vendor.download(url, timeout_s=5, limit=4096)
    finally:
        server.shutdown()

    data = b"/** plotly */"
    tgz = tarball({"package/p.min.js": data})
    monkeypatch.setattr(vendor, "VENDOR_DIR", tmp_path)
    monkeypatch.setattr(vendor, "download", lambda url, timeout_s: tgz)
    bundle = pinned(tgz, data, tmp_path)
    (tmp_path / "p").write_text("a file where the folder goes")
    with pytest.raises(vendor.FetchError, match="p.min.js"):  # said, not an OSError out of make install
        vendor.fetch(bundle)
    (tmp_path / "p").unlink()
    (tmp_path / "p").mkdir()
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "p" / "p.min.js.part").symlink_to(victim)  # a link planted where the file is written first
    assert vendor.fetch(bundle).read_bytes() == data and vendor.is_fetched(bundle)
    assert victim.read_text() == "untouched"
