"""The swe-pkg pytest runner program: run in the sandbox, never imported by the build or verifier.

:mod:`trainer.families.pkgs.runner` ships this file's text with every job and describes what it
does; its constants must match the ones there. Standard library only until the spawner imports
pytest; importing this module runs nothing.

Processes: the **parent** (trusted: non-dumpable, holds the nonce, alone writes the job's
stdout), the **spawner** (forked before the parent reads its spec: it never holds the nonce; it
imports pytest once and forks one pytest child per run) and one **pytest child** per run (the
package's code and tests run there; its stdout and stderr are the job's stderr, or /dev/null).
The spawner makes the tree read-only (files and folders) while a child runs, and puts the modes
back after. Each child gets a fresh records socket and a key from the parent (passed through the spawner with
SCM_RIGHTS); the parent turns the records that carry the key into marker lines carrying the
nonce. A socket, because a pipe can be opened again by path (``/proc/self/fd/N``: any file API of
the package's imports, ``logging.FileHandler`` say, then writes records), and a key, because code
that reaches a descriptor by number (``os.write``) could write to the socket too.
"""
import json, os, resource, select, signal, socket, sys, threading, time, _ctypes  # noqa: E401

SPEC_FILE = ".temper_pkg_spec"
"""The job's spec (JSON: nonce, runs); the parent unlinks it before it forks."""
RUN_FILE = ".temper_pkg_run"
"""One run's instructions for the spawner (no secret in it), unlinked by the spawner."""
PROGRAM_FILE = ".temper_pkg_runner.py"
"""This program, as shipped in the job (the parent unlinks it once started)."""
MARK = "@@TEMPER-PKG"
"""Marker line prefix: ``MARK nonce run kind json``."""
ALLOWED_SITE = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli")
"""Third-party top-level modules the pytest child may have (pytest and what it needs)."""
NO_RESULT = "no result: the test process ended before this test finished"


class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _Libc:
    _handle = _ctypes.dlopen(None)


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL
    _restype_ = _Int


def _protect():
    """Non-dumpable: same-uid processes can neither ptrace the parent nor open its /proc files."""
    prctl = _Function(("prctl", _Libc()))
    if prctl(4, 0, 0, 0, 0) != 0 or prctl(3, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0; PR_GET_DUMPABLE
        os.write(2, b"temper pkg runner: prctl(PR_SET_DUMPABLE) failed\n")
        os._exit(120)


def _close_other_fds(keep):
    """Close every descriptor above 2 but those in ``keep``."""
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 16)


def _failure_text(report):
    """The ``E`` lines of a failed report (pytest's own explanation), else its crash line."""
    try:
        text = str(report.longrepr)
    except Exception:
        return "unprintable failure"
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    if not lines:
        crash = getattr(report.longrepr, "reprcrash", None)
        lines = [getattr(crash, "message", "") or text.strip().splitlines()[-1:] and text.strip().splitlines()[-1] or "failed"]
    return "\n".join(lines)[:1000]


class _Plugin:
    """The child's pytest plugin: one record per test at the end of its teardown, over the socket."""

    def __init__(self, fd, key):
        # lazy: only the pytest child has pytest (the parent never imports it)
        import _pytest.reports
        import _pytest.runner
        self._fd, self._write, self._phases, self._key = fd, os.write, {}, key
        self._watched = [(_pytest.runner, "call_and_report"), (_pytest.runner, "runtestprotocol"),
                         (_pytest.runner.CallInfo, "from_call"), (_pytest.reports.TestReport, "from_item_and_call"),
                         (_pytest.reports.BaseReport, "passed")]
        self._seen = [m.__dict__.get(n) for m, n in self._watched]

    def send(self, obj):
        obj["k"] = self._key
        data = (json.dumps(obj) + "\n").encode("utf-8", "replace")
        while data:
            data = data[self._write(self._fd, data):]

    def _tampered(self):
        return any(m.__dict__.get(n) is not v for (m, n), v in zip(self._watched, self._seen))

    def pytest_collection_finish(self, session):
        self.send({"t": "c", "ids": [item.nodeid for item in session.items]})

    def pytest_collectreport(self, report):
        if report.failed:
            self.send({"t": "e", "msg": "collecting %s failed: %s" % (report.nodeid, _failure_text(report))})

    def pytest_runtest_logreport(self, report):
        phases = self._phases.setdefault(report.nodeid, {})
        phases[report.when] = report
        if report.when != "teardown":
            return
        del self._phases[report.nodeid]
        outcome, msg = "p", ""
        for when in ("setup", "call", "teardown"):
            rep = phases.get(when)
            if rep is None:
                continue
            if rep.failed:
                outcome, msg = "f", "%s: %s" % (when, _failure_text(rep)) if when != "call" else _failure_text(rep)
                break
            if rep.skipped:
                outcome = "s"
        if outcome == "p" and ("call" not in phases or "setup" not in phases):
            outcome, msg = "f", "the test did not run"
        if self._tampered():
            outcome, msg = "f", "pytest's reporting was patched during the run"
        self.send({"t": "r", "id": report.nodeid, "o": outcome, "msg": msg})


def _tracer(root, wanted, lines):
    """A sys.settrace function recording the executed lines of the files in ``wanted``."""
    memo = {}

    def local(frame, event, arg):
        if event == "line":
            lines[memo[frame.f_code.co_filename]].add(frame.f_lineno)
        return local

    def trace(frame, event, arg):
        name = frame.f_code.co_filename
        rel = memo.get(name, 0)
        if rel == 0:
            rel = os.path.relpath(name, root) if name.startswith(root + os.sep) else None
            rel = rel if rel in wanted else None
            memo[name] = rel
            if rel is not None:
                lines.setdefault(rel, set())
        return local if rel is not None else None
    return trace


def _child(wfd, run, key):
    """The pytest child of one run (never returns)."""
    try:
        os.setpgid(0, 0)
        if run.get("output") == "discard":
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
        _close_other_fds({wfd})
        if run.get("memory_mb"):
            limit = int(run["memory_mb"]) << 20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        root = os.getcwd()
        sys.path[:0] = [os.path.join(root, p) if p != "." else root for p in run.get("paths", ["."])]
        import pytest  # lazy: the spawner imported it once; only children use it

        plugin = _Plugin(wfd, key)
        lines = {}
        if run.get("coverage"):
            trace = _tracer(root, set(run["coverage"]), lines)
            threading.settrace(trace)
            sys.settrace(trace)
        code = pytest.main(list(run.get("args", [])) + list(run.get("select") or []), plugins=[plugin])
        sys.settrace(None)
        if run.get("coverage"):
            plugin.send({"t": "v", "lines": {k: sorted(v) for k, v in lines.items()}})
        plugin.send({"t": "x", "code": int(code)})
    except BaseException as e:  # noqa: BLE001 - the child reports what it can, then ends
        try:
            os.write(2, ("temper pkg runner: the pytest child failed: %r\n" % (e,)).encode("utf-8", "replace"))
        except BaseException:
            pass
    finally:
        os._exit(0)


def _read_only(root):
    """Make every file and folder under ``root`` read-only for the pytest child (the package's
    code cannot rewrite a test module or a module imported later); returns the modes to put back."""
    modes = []
    for folder, dirs, files in os.walk(root):
        for path in [folder] + [os.path.join(folder, name) for name in files]:
            try:
                st = os.lstat(path)
                if not (st.st_mode & 0o170000 == 0o120000):  # not a link
                    os.chmod(path, st.st_mode & 0o7555)
                    modes.append((path, st.st_mode & 0o7777))
            except OSError:
                pass
    return modes


def _writable(modes):
    for path, mode in modes:
        try:
            os.chmod(path, mode)
        except OSError:
            pass


def _spawner(sock):
    """Import pytest once, then fork one pytest child per request (never returns)."""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(2, 1)
        _close_other_fds({sock.fileno()})
        sys.dont_write_bytecode = True  # a mutant written in the same second must not meet a stale .pyc
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        # lazy: pytest is imported by the spawner alone, after the parent forked it
        import _pytest.config
        for name in _pytest.config.default_plugins:
            try:
                __import__("_pytest." + name)
            except Exception:
                pass
        __import__("pytest")
        for name in ALLOWED_SITE:
            try:
                __import__(name)
            except Exception:
                pass
        # no third-party package but pytest: the site folders leave the path once pytest is in
        sys.path[:] = [p for p in sys.path if "-packages" not in p]
        while True:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 256, 1)
            if not msg or not fds:
                os._exit(0)
            with open(RUN_FILE, "rb") as f:
                run = json.loads(f.read())
            os.unlink(RUN_FILE)
            modes = _read_only(".")
            pid = os.fork()
            if pid == 0:
                sock.close()
                _child(fds[0], run, msg[1:].decode("ascii", "replace"))
            os.close(fds[0])
            sock.sendall(b"P %d\n" % pid)
            status = os.waitpid(pid, 0)[1]
            try:
                os.killpg(pid, signal.SIGKILL)  # what the child left behind in its group
            except OSError:
                pass
            _writable(modes)
            sock.sendall(b"X %d\n" % status)
    finally:
        os._exit(0)


class _Lines:
    """Line reader over the spawner's socket."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def line(self):
        while b"\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                raise EOFError("the spawner is gone")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()


def _write_files(files):
    """Write ``files`` into the work dir; returns what was there before (None: nothing)."""
    before = {}
    for path, content in files.items():
        try:
            with open(path, "rb") as f:
                before[path] = f.read()
        except OSError:
            before[path] = None
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "wb") as f:
            f.write(content.encode("utf-8", "surrogatepass"))
    return before


def _restore(before):
    for path, content in before.items():
        if content is None:
            try:
                os.unlink(path)
            except OSError:
                pass
        else:
            with open(path, "wb") as f:
                f.write(content)


def _collect(rfd, lines, pid, timeout_s):
    """Read one run's records until the child has exited and the pipe is drained (or the run's
    time is up: the child is killed). Returns ``(records bytes, exit status, timed out)``."""
    deadline = time.monotonic() + timeout_s
    chunks, status, timed_out, eof = [], None, False, False
    while status is None:
        if b"\n" in lines.buf:
            ready = [lines.sock]
        else:
            wait = None if timed_out else max(0.0, deadline - time.monotonic())
            ready = select.select([lines.sock] + ([] if eof else [rfd]), [], [], wait)[0]
        if not ready:
            timed_out = True
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            continue
        if rfd in ready:
            data = os.read(rfd, 1 << 16)
            eof = not data
            chunks.append(data)
        if lines.sock in ready:
            line = lines.line()
            if line.startswith("X "):
                status = int(line[2:])
    os.set_blocking(rfd, False)
    while not eof:  # what the child wrote before it exited (a descendant may hold the pipe open)
        try:
            data = os.read(rfd, 1 << 16)
        except BlockingIOError:
            break
        eof = not data
        chunks.append(data)
    return b"".join(chunks), status, timed_out


def main():
    """The parent: read the spec after the spawner exists, run each run, print the markers."""
    _protect()
    spec_fd = os.open(SPEC_FILE, os.O_RDONLY)
    os.unlink(SPEC_FILE)
    os.set_inheritable(spec_fd, False)
    try:
        os.unlink(PROGRAM_FILE)
    except OSError:
        pass
    out = os.dup(1)
    os.set_inheritable(out, False)
    mine, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        os.close(spec_fd)
        os.close(out)
        mine.close()
        _spawner(theirs)
    theirs.close()
    with os.fdopen(spec_fd, "rb") as f:
        spec = json.loads(f.read())
    nonce = spec["nonce"]
    lines = _Lines(mine)

    def mark(run, kind, payload):
        text = "\n%s %s %d %s %s\n" % (MARK, nonce, run, kind, json.dumps(payload))
        data = text.encode("utf-8", "replace")
        while data:
            data = data[os.write(out, data):]

    for k, run in enumerate(spec["runs"]):
        before = _write_files(run.get("files", {}))
        with open(RUN_FILE, "w") as f:
            json.dump({key: value for key, value in run.items() if key != "files"}, f)
        # a socket, not a pipe: it cannot be opened again by path (/proc/self/fd/N), and a record
        # counts only with the run's key, which the pytest child's code never gets as such
        ours, its = socket.socketpair()
        r, w = ours.detach(), its.detach()
        key = os.urandom(16).hex()
        socket.send_fds(mine, [b"R" + key.encode()], [w])
        os.close(w)
        child = int(lines.line()[2:])
        began = time.monotonic()
        data, status, timed_out = _collect(r, lines, child, float(run.get("timeout_s", 3600)))
        wall_s = round(time.monotonic() - began, 3)
        os.close(r)
        _restore(before)
        for raw in data.split(b"\n"):
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            kind = record.get("t") if type(record) is dict and record.get("k") == key else None
            if kind == "r" and type(record.get("id")) is str and record.get("o") in ("p", "f", "s"):
                mark(k, "R", [record["id"], record["o"], str(record.get("msg", ""))[:1000]])
            elif kind == "c" and type(record.get("ids")) is list:
                mark(k, "C", [i for i in record["ids"] if type(i) is str])
            elif kind in ("e", "v", "x"):
                mark(k, kind.upper(), record.get("msg", record.get("lines", record.get("code"))))
        mark(k, "D", {"status": status, "timeout": timed_out, "wall_s": wall_s})
    mine.close()
    os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
