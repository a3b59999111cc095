"""Git objects computed by trusted code, without running git: the ids of a generated history's
commits, and the history as a git bundle.

The ``shell-git`` tasks build their repository with a setup script run in the sandbox
(:class:`~trainer.families.shell.tasks.History`); the same history is built here as objects
(git's own formats: ``blob``, ``tree`` and ``commit`` bodies hashed with their ``<kind> <size>\\0``
header by SHA-1), so the verifier knows the id of every commit the task started from, and what a
merge of two of them must name as its parents, from the task alone. A commit's id covers its
tree, its parents' ids and so the whole history below it: a history rewritten in any way (a new
root, ``filter-branch``, an amended commit) has other ids. :meth:`Repo.bundle` writes the
repository as ``git bundle create`` would (a v2 bundle: the refs, then a pack of whole objects),
which is what the task's reference answer carries.

>>> blob_id(b"hello\\n")  # what `echo hello | git hash-object --stdin` prints
'ce013625030ba8dba906f756967f9e9ca394464a'
>>> repo = Repo()
>>> first = repo.commit({"a.txt": "x\\n"}, "Start", 1_700_000_060)
>>> repo.heads == {"main": first}, repo.files(first)
(True, {'a.txt': 'x\\n'})
>>> repo.bundle().startswith(b"# v2 git bundle\\n" + first.encode() + b" HEAD\\n")
True
"""
from __future__ import annotations

import copy
import hashlib
import struct
import zlib
from dataclasses import dataclass, field

AUTHOR = "Temper <temper@example.invalid>"
"""Author and committer of every commit of a generated history (``GIT_START`` sets the same)."""
KINDS = {"commit": 1, "tree": 2, "blob": 3}
"""Pack type codes."""


def object_id(kind: str, body: bytes) -> str:
    """The id git gives an object of ``kind`` with this body."""
    return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body).hexdigest()


def blob_id(data: bytes) -> str:
    return object_id("blob", data)


@dataclass
class Repo:
    """A repository's objects and branches, built commit by commit."""

    objects: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """Every object by id: (kind, body)."""
    heads: dict[str, str] = field(default_factory=dict)
    """Branch name -> its last commit."""
    branch: str = "main"
    """The branch HEAD names."""
    snapshots: dict[str, dict[str, str]] = field(default_factory=dict)
    """Commit -> the files of its tree."""

    def _put(self, kind: str, body: bytes) -> str:
        oid = object_id(kind, body)
        self.objects[oid] = (kind, body)
        return oid

    def _tree(self, files: dict[str, str]) -> str:
        """The id of the tree holding ``files`` (written with its subtrees and blobs)."""
        children: dict[str, dict[str, str]] = {}
        entries: list[tuple[str, str, str]] = []  # (sort key, mode and name, id)
        for path, text in files.items():
            top, sep, rest = path.partition("/")
            if sep:
                children.setdefault(top, {})[rest] = text
            else:
                entries.append((top, f"100644 {top}", self._put("blob", text.encode())))
        for name, below in children.items():  # git orders a directory as if its name ended in "/"
            entries.append((name + "/", f"40000 {name}", self._tree(below)))
        body = b"".join(head.encode() + b"\0" + bytes.fromhex(oid) for _, head, oid in sorted(entries))
        return self._put("tree", body)

    def commit(self, files: dict[str, str], message: str, date: int, parents: list[str] | None = None) -> str:
        """Commit ``files`` as the whole tree on the current branch (``parents``: its last commit,
        if any) at ``date`` (seconds, UTC); the new commit's id."""
        if parents is None:
            parents = [self.heads[self.branch]] if self.branch in self.heads else []
        lines = [f"tree {self._tree(files)}"] + [f"parent {p}" for p in parents]
        lines += [f"author {AUTHOR} {date} +0000", f"committer {AUTHOR} {date} +0000", "", message]
        oid = self._put("commit", ("\n".join(lines) + "\n").encode())
        self.heads[self.branch] = oid
        self.snapshots[oid] = dict(files)
        return oid

    def files(self, commit: str) -> dict[str, str]:
        return dict(self.snapshots[commit])

    def copy(self) -> "Repo":
        return copy.deepcopy(self)

    def bundle(self) -> bytes:
        """The repository as a v2 git bundle: HEAD and every branch, and a pack of every object."""
        refs = [("HEAD", self.heads[self.branch])] + [(f"refs/heads/{n}", oid) for n, oid in sorted(self.heads.items())]
        header = "# v2 git bundle\n" + "".join(f"{oid} {name}\n" for name, oid in refs) + "\n"
        return header.encode() + pack(self.objects)


def pack(objects: dict[str, tuple[str, bytes]]) -> bytes:
    """A version 2 packfile of ``objects``, each whole (no deltas), with its SHA-1 trailer."""
    out = [b"PACK", struct.pack(">II", 2, len(objects))]
    for oid in sorted(objects):
        kind, body = objects[oid]
        size = len(body)
        head = bytearray([KINDS[kind] << 4 | size & 0x0F])
        size >>= 4
        while size:
            head[-1] |= 0x80
            head.append(size & 0x7F)
            size >>= 7
        out += [bytes(head), zlib.compress(body)]
    data = b"".join(out)
    return data + hashlib.sha1(data).digest()
