"""A job's output files (:class:`~trainer.verifiers.artifacts.Outputs`), both ends: the agent
reads them inside the sandbox, the host checks what the agent sends.

**Inside** (:data:`OUTPUTS_SOURCE`, part of the agent): after the job's last process is reaped
(nothing of the job runs while its files are read) and before its result frame, the agent sends
one frame 6 per name asked for, in order. It opens each name from /work one component at a time,
relative to the directory it opened last, with ``O_NOFOLLOW`` (``O_DIRECTORY`` on the way), so a
symbolic link anywhere on the path is refused, never followed; it then takes only a regular file
with one link (``lstat`` first, so a fifo or device is never opened; ``O_NONBLOCK | O_NOCTTY``
anyway, and the opened file checked to be the one seen), and reads at most the file's bound and
what is left of the total. It reads from inside the sandbox's mount namespace, so even a path it
were tricked into would see the sandbox's files only: the host never opens a path of the job's.

**The frame**: ``state(1) name_length(2) size(8)`` big-endian, the name, then the file's first
bytes (state 0) or why it was refused (state 1: UTF-8, at most 200 bytes).

**Outside** (:class:`OutputsReader`): a frame for a job that asked for no files, a name out of
order or not asked for, more bytes than the bounds allow or than the file's size, or an unknown
state is garbage: the agent is lost (``runtime_error``, the sandbox retired), as for any frame
the agent would not send. A name the agent never answered comes back refused.
"""
from __future__ import annotations

import struct

from trainer.verifiers.artifacts import MAX_REASON_CHARS, NAME_CHARS, Artifact, Outputs

HEADER = struct.Struct(">BHQ")
"""An artifact frame's header: state (0 bytes, 1 refused), the name's length, the file's size."""
NOT_ANSWERED = "the sandbox handed nothing back for it (the job broke its sandbox)"

OUTPUTS_SOURCE = "OUTPUT_NAME_CHARS = %r\n" % "".join(sorted(NAME_CHARS)) + r'''
S_IFMT, S_IFREG = 0o170000, 0o100000
FILE_KINDS = {0o040000: "a directory", 0o120000: "a symbolic link", 0o010000: "a fifo",
              0o020000: "a character device", 0o060000: "a block device", 0o140000: "a socket"}

def output_problem(name):
    """The agent's own check of a name (the host checked it first): a relative path of allowed
    characters, no empty, . or .. component."""
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        return "not a name"
    for part in name.split("/"):
        if part in ("", ".", "..") or any(c not in OUTPUT_NAME_CHARS for c in part):
            return "not a relative path under the job's directory"
    return ""

def open_output(name):
    """(fd, size, "") of the regular file `name` under /work, else (-1, size, why)."""
    parts = name.split("/")
    dfd = os.open("/work", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as e:
                what = "not a directory (a symbolic link or a file)" if e.errno in (20, 40) else os.strerror(e.errno)
                return -1, 0, "%s: %s" % ("/".join(parts[:i + 1]), what)
            os.close(dfd)
            dfd = nfd
        try:
            seen = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except OSError as e:
            return -1, 0, "no such file" if e.errno == 2 else os.strerror(e.errno)
        kind = seen.st_mode & S_IFMT
        if kind != S_IFREG:
            return -1, 0, "not a regular file: " + FILE_KINDS.get(kind, "another kind")
        if seen.st_nlink != 1:
            return -1, seen.st_size, "a hard link (%d names)" % seen.st_nlink
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dfd)
        except OSError as e:
            return -1, seen.st_size, "cannot be opened: " + os.strerror(e.errno)
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino, now.st_mode & S_IFMT, now.st_nlink) != (seen.st_dev, seen.st_ino, S_IFREG, 1):
            os.close(fd)
            return -1, 0, "changed while it was opened"
        return fd, now.st_size, ""
    finally:
        os.close(dfd)

def read_upto(fd, n):
    chunks = []
    while n > 0:
        data = os.read(fd, min(n, 1 << 16))
        if not data:
            break
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)

def send_outputs(spec):
    """One frame 6 per name asked for, in order (see workers/sandbox/agent_outputs.py)."""
    left = spec["total"]
    for name in spec["names"]:
        fd, size, why, body = -1, 0, output_problem(name), b""
        try:
            if not why:
                fd, size, why = open_output(name)
            if not why:
                bound = min(spec["file"], left)
                if size > bound and not spec["truncate"]:
                    why = "%d bytes: over the bound of %d" % (size, bound)
                elif size > 0 and bound == 0:
                    why = "%d bytes: over the job's total bound of %d" % (size, spec["total"])
                else:
                    body = read_upto(fd, bound)
                    left -= len(body)
        except OSError as e:
            why, body = "cannot be read: " + os.strerror(e.errno), b""
        finally:
            if fd >= 0:
                os.close(fd)
        raw = name.encode("ascii", "replace")[:200] if isinstance(name, str) else b"?"
        tail = why.encode("utf-8", "replace")[:200] if why else body
        send(6, struct.pack(">BHQ", 1 if why else 0, len(raw), size) + raw + tail)
'''
"""The agent's side (it runs inside ``python3 -I -S`` with the agent's ``os``, ``struct`` and ``send``)."""


class OutputsReader:
    """The host's side for one job: the artifact frames checked against what the job asked for."""

    def __init__(self, outputs: Outputs | None):
        self.outputs = outputs
        self.got: list[Artifact] = []
        self.left = outputs.total_bytes if outputs is not None else 0

    def feed(self, payload: bytes) -> None:
        """One artifact frame; ValueError when it is not one the agent would send."""
        outputs = self.outputs
        if outputs is None or len(self.got) >= len(outputs.names):
            raise ValueError("an artifact the job did not ask for")
        if len(payload) < HEADER.size:
            raise ValueError("a short artifact frame")
        state, length, size = HEADER.unpack_from(payload)
        name = outputs.names[len(self.got)]
        raw, body = payload[HEADER.size:HEADER.size + length], payload[HEADER.size + length:]
        if raw != name.encode("ascii"):
            raise ValueError(f"an artifact out of order: {raw[:100]!r}, not {name!r}")
        if state == 0:
            bound = min(outputs.file_bytes, self.left)
            if len(body) > bound or len(body) > size or (not outputs.truncate and len(body) != size):
                raise ValueError(f"artifact {name}: {len(body)} bytes of {size}, over its bound")
            self.left -= len(body)
            self.got.append(Artifact(name, body, size))
        elif state == 1 and 0 < len(body) <= MAX_REASON_CHARS:
            self.got.append(Artifact(name, b"", size, body.decode("utf-8", "replace")))
        else:
            raise ValueError(f"artifact {name}: a frame of state {state} with {len(body)} bytes")

    def artifacts(self) -> list[Artifact]:
        """Every name asked for, in order: its artifact, or refused when no answer came."""
        if self.outputs is None:
            return []
        return self.got + [Artifact(n, refused=NOT_ANSWERED) for n in self.outputs.names[len(self.got):]]
