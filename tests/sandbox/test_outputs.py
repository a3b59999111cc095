"""A job's output files (agent_outputs.py) on every backend: what comes back, and what a hostile
job can make of a name it does not choose but whose file it controls.

The `clean` fixture checks afterwards that no sandbox process or cgroup is left; each test also
checks the backend still runs a job and hands its file back.
"""
from __future__ import annotations

import struct

import pytest

from trainer.verifiers.artifacts import Outputs
from workers.sandbox import Limits, execute
from workers.sandbox.agent_outputs import HEADER, NOT_ANSWERED, OutputsReader

from sandbox_helpers import SMALL

SETUP = r'''
import os, socket
os.makedirs("logs")
open("logs/build.log", "w").write("built\n")
open("report.txt", "w").write("2 passed\n")
os.symlink("/etc/passwd", "passwd")                  # a link out of the sandbox's tree
os.symlink("/usr/lib", "lib")                        # a link as a directory on the way
os.symlink("/dev/zero", "zero")
os.mkfifo("pipe")                                    # a reader that opens it would block
os.mkdir("replaced")                                 # a file replaced by a directory
open("a", "w").write("a")
os.link("a", "b")                                    # a hard link inside the work dir
try:
    os.link("/usr/bin/env", "env")                   # a hard link to a file outside: refused by the kernel
    print("LINKED")
except OSError as e:
    print("LINK-REFUSED", e.errno)
s = socket.socket(socket.AF_UNIX)
s.bind("sock")
'''


def ask(backend, program: str, outputs: Outputs, limits: Limits = SMALL):
    return execute({"main.py": program}, ["python3", "main.py"], limits, backend=backend, domain="outputs", outputs=outputs)


def by_name(verdict):
    return {a.name: a for a in verdict.artifacts}


def healthy(backend) -> None:
    v = ask(backend, "open('ok.txt', 'w').write('fine')", Outputs(("ok.txt",)))
    assert v.status == "ok", v
    assert [(a.name, a.data, a.refused) for a in v.artifacts] == [("ok.txt", b"fine", "")]


def test_hostile_files_are_refused_never_followed(clean):
    names = ("report.txt", "logs/build.log", "passwd", "lib/os.py", "zero", "pipe", "replaced", "b", "env", "sock", "missing")
    v = ask(clean, SETUP, Outputs(names))
    assert v.status == "ok", v
    assert b"LINK-REFUSED" in v.stdout and b"LINKED" not in v.stdout
    got = by_name(v)
    assert list(got) == list(names)
    assert (got["report.txt"].data, got["report.txt"].size, got["report.txt"].refused) == (b"2 passed\n", 9, "")
    assert got["logs/build.log"].data == b"built\n"
    refusals = {name: got[name].refused for name in names[2:]}
    assert refusals == {
        "passwd": "not a regular file: a symbolic link",
        "lib/os.py": "lib: not a directory (a symbolic link or a file)",
        "zero": "not a regular file: a symbolic link",
        "pipe": "not a regular file: a fifo",
        "replaced": "not a regular file: a directory",
        "b": "a hard link (2 names)",
        "env": "no such file",
        "sock": "not a regular file: a socket",
        "missing": "no such file",
    }
    assert all(got[name].data == b"" for name in names[2:])
    assert b"root:" not in b"".join(a.data for a in v.artifacts)
    healthy(clean)


def test_bounds_truncate_or_refuse_with_the_reason(clean):
    program = "open('big', 'wb').write(b'x' * (2 << 20))\nfor n in 'pqr':\n    open(n, 'wb').write(n.encode() * 3000)\n"
    v = ask(clean, program, Outputs(("big", "p", "q", "r"), file_bytes=4096, total_bytes=9000))
    assert v.status == "ok", v
    got = by_name(v)
    assert (len(got["big"].data), got["big"].size, got["big"].truncated) == (4096, 2 << 20, True)
    assert (got["p"].data, got["q"].data) == (b"p" * 3000, b"q" * 1904)  # the total's 9000 bytes, in order
    assert got["q"].truncated and got["r"].data == b""
    assert got["r"].refused == "3000 bytes: over the job's total bound of 9000"
    strict = ask(clean, program, Outputs(("big", "p"), file_bytes=4096, truncate=False))
    assert by_name(strict)["big"].refused == "2097152 bytes: over the bound of 4096"
    assert by_name(strict)["p"].data == b"p" * 3000
    healthy(clean)


def test_files_come_back_from_a_failed_job_and_the_agent_checks_names_itself(clean):
    v = ask(clean, "open('build.log', 'w').write('error: x\\n')\nraise SystemExit(2)", Outputs(("build.log",)))
    assert (v.status, v.exit_code, v.artifacts[0].data) == ("runtime_error", 2, b"error: x\n")
    # a name past the host's own check (which refuses it: below) is refused by the agent too
    forged = Outputs(("report.txt",))
    object.__setattr__(forged, "names", ("../../etc/passwd", "/etc/passwd"))
    v = ask(clean, "pass", forged)
    assert [a.refused for a in v.artifacts] == ["not a relative path under the job's directory"] * 2
    healthy(clean)


@pytest.mark.parametrize("names, message", [
    (("../x",), "'..' is not a file name"), (("/etc/passwd",), "not a relative path"), (("a//b",), "not a relative path"),
    (("a b",), "not a relative path"), (tuple(f"f{i}" for i in range(17)), "1 to 16 names"), (("a", "a"), "given twice"),
])
def test_outputs_refuse_names_that_leave_the_job_dir_and_too_many_files(names, message):
    with pytest.raises(ValueError, match=message):
        Outputs(names)
    with pytest.raises(ValueError, match="file_bytes"):
        Outputs(("a",), file_bytes=(512 << 10) + 1)


def frame(state: int, name: bytes, size: int, body: bytes) -> bytes:
    return HEADER.pack(state, len(name), size) + name + body


@pytest.mark.parametrize("payload, why", [
    (frame(0, b"b", 1, b"x"), "out of order"),
    (frame(0, b"a", 10, b"x" * 11), "over its bound"),
    (frame(0, b"a", 100, b"x" * 65), "over its bound"),
    (frame(2, b"a", 0, b"why"), "state 2"),
    (frame(1, b"a", 0, b""), "state 1"),
    (struct.pack(">B", 0), "short"),
])
def test_the_host_takes_only_frames_the_agent_would_send(payload, why):
    reader = OutputsReader(Outputs(("a", "b"), file_bytes=64))
    with pytest.raises(ValueError, match=why):
        reader.feed(payload)
    with pytest.raises(ValueError, match="did not ask"):
        OutputsReader(None).feed(frame(0, b"a", 1, b"x"))
    reader = OutputsReader(Outputs(("a", "b")))
    reader.feed(frame(1, b"a", 0, b"no such file"))
    assert [(a.name, a.refused) for a in reader.artifacts()] == [("a", "no such file"), ("b", NOT_ANSWERED)]
