"""The code-test harness program: run in the sandbox, never imported by the verifier.

:mod:`trainer.verifiers.code_harness` ships this file's text (and its bytecode) with every code
job and describes what it does; its constants must match the ones there. Standard library only:
it runs under the sandbox's own ``python3 -I -S``; importing it (the verifier reads its constants)
runs nothing.
"""
import builtins, marshal, os, sys, _ctypes, _frozen_importlib_external, _json, _signal  # noqa: E401

SPEC_FILE = ".temper_tests"
"""The tests and the nonce (marshal), unlinked before the fork."""
PROGRAM_FILE = "solution.py"
"""The program under test."""
MAX_REPLY_BYTES = 8 << 20
"""Longest encoded value the program may return from one call."""
LOAD_FAILED_EXIT = 3
"""Exit code when the program failed to load (the job is then a runtime_error)."""

class _Int(_ctypes._SimpleCData):
    _type_ = "i"

class _Libc:
    _handle = _ctypes.dlopen(None)

class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL
    _restype_ = _Int

def _protect():
    """Non-dumpable: same-uid processes can neither ptrace this one nor open its /proc files.
    (prctl through _ctypes itself: the ctypes package costs 5-10 ms to import; its classes are
    defined with the module, so that a zygote that imported it has them made.)"""
    prctl = _Function(("prctl", _Libc()))
    if prctl(4, 0, 0, 0, 0) != 0 or prctl(3, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0; PR_GET_DUMPABLE
        os.write(2, b"temper harness: prctl(PR_SET_DUMPABLE) failed\n")
        os._exit(120)

class BoundaryError(Exception):
    """A value that cannot cross between the harness and the candidate."""

class CandidateError(Exception):
    """The program raised an exception that is not a builtin one, or broke the call protocol."""

_esc = _json.encode_basestring_ascii
_INF = float("inf")

def encode(x, depth=0):
    """JSON text of a plain value, exact types only (tags keep tuple, set, bytes... apart)."""
    if depth > 64:
        raise BoundaryError("value nested more than 64 deep")
    t = type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return str(x) if -(1 << 62) < x < (1 << 62) else '{"i":"%x"}' % x
    if t is float:
        if x != x:
            return '{"F":"nan"}'
        if x == _INF or x == -_INF:
            return '{"F":"%s"}' % ("inf" if x > 0 else "-inf")
        return repr(x)
    if t is str:
        return _esc(x)
    d = depth + 1
    if t is list:
        return "[" + ",".join([encode(v, d) for v in x]) + "]"
    if t is tuple:
        return '{"t":[' + ",".join([encode(v, d) for v in x]) + "]}"
    if t is dict:
        return '{"d":[' + ",".join(["[" + encode(k, d) + "," + encode(v, d) + "]" for k, v in x.items()]) + "]}"
    if t is set or t is frozenset:
        return '{"%s":[' % ("s" if t is set else "f") + ",".join([encode(v, d) for v in x]) + "]}"
    if t is bytes or t is bytearray:
        return '{"%s":"%s"}' % ("b" if t is bytes else "B", x.hex())
    if t is complex:
        return '{"c":[' + encode(x.real, d) + "," + encode(x.imag, d) + "]}"
    raise BoundaryError("a value of type %s cannot cross the sandbox boundary" % t.__name__)

def _floatish(v):
    if type(v) is float or type(v) is int:
        return float(v)
    raise BoundaryError("bad complex part")

_FLOATS = {"nan": float("nan"), "inf": _INF, "-inf": -_INF}
_TAGS = {
    "t": lambda v: tuple(v) if type(v) is list else None,
    "s": lambda v: set(v) if type(v) is list else None,
    "f": lambda v: frozenset(v) if type(v) is list else None,
    "b": lambda v: bytes.fromhex(v) if type(v) is str else None,
    "B": lambda v: bytearray.fromhex(v) if type(v) is str else None,
    "F": lambda v: _FLOATS.get(v) if type(v) is str else None,
    "i": lambda v: int(v, 16) if type(v) is str and len(v) < 100000 else None,
    "c": lambda v: complex(_floatish(v[0]), _floatish(v[1])) if type(v) is list and len(v) == 2 else None,
}

def _pairs(v):
    if type(v) is not list or not all(type(p) is list and len(p) == 2 for p in v):
        raise BoundaryError("bad dict")
    return dict(v)

def _hook(obj):
    if len(obj) != 1:
        raise BoundaryError("bad value")
    (tag, v), = obj.items()
    if tag == "d":
        return _pairs(v)
    make = _TAGS.get(tag)
    out = make(v) if make is not None else None
    if out is None:
        raise BoundaryError("bad value")
    return out

def _constant(name):
    raise BoundaryError("bare %s is not a value here" % name)

class _Decoding:
    strict = True
    object_hook = staticmethod(_hook)
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)

_scan = _json.make_scanner(_Decoding)

def decode(text):
    """The value of one encoded line; BoundaryError for anything that is not exactly that."""
    try:
        value, end = _scan(text, 0)
    except BoundaryError:
        raise
    except StopIteration:
        raise BoundaryError("not a value") from None
    except Exception as e:
        raise BoundaryError("undecodable value (%s)" % type(e).__name__) from None
    if end != len(text):
        raise BoundaryError("trailing data after the value")
    return value

def describe(e):
    try:
        text = str(e)
    except BaseException:
        text = "?"
    return "%s: %s" % (type(e).__name__, text[:300])

def _plain(value):
    """Iterators and views become lists (a generator cannot cross the boundary)."""
    t = type(value)
    if t in (list, tuple, dict, set, frozenset, str, int, float, bool, bytes, bytearray, complex) or value is None:
        return value
    if hasattr(value, "__next__") or t.__name__ in ("range", "dict_keys", "dict_values", "dict_items", "map", "filter", "zip", "reversed", "enumerate"):
        out = []
        for item in value:
            out.append(item)
            if len(out) > 1000000:
                raise BoundaryError("iterator longer than 1000000 items")
        return out
    return value

def _serve(rfd, wfd):
    """The candidate: load the program, then answer calls until the harness closes the pipe."""
    rf = os.fdopen(rfd, "rb")
    wf = os.fdopen(wfd, "wb")

    def reply(line):
        wf.write(line.encode("ascii") + b"\n")
        wf.flush()

    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        with open(PROGRAM_FILE, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, "solution.py", "exec"), ns)
    except BaseException as e:
        reply(encode([0, "x", describe(e)]))
        return
    reply(encode([0, "l"]))
    while True:
        line = rf.readline()
        if not line:
            return
        cid, name, args, kwargs = decode(line.decode("ascii").rstrip("\n"))
        try:
            if name not in ns:
                raise NameError("name %r is not defined by the program" % name)
            out = encode([cid, "r", _plain(ns[name](*args, **kwargs))])
        except BaseException as e:
            try:
                text = str(e)[:300]
            except BaseException:
                text = "?"
            try:
                out = encode([cid, "e", type(e).__name__, text])
            except BaseException:
                out = encode([cid, "e", "Exception", "unprintable exception"])
        reply(out)

class _Candidate:
    """The harness's end of the pipes to the candidate process."""

    def __init__(self, pid, wfd, rfd):
        self.pid, self.broken, self.n = pid, None, 0
        self.gone, self.status = False, None
        self.w = os.fdopen(wfd, "wb")
        self.r = os.fdopen(rfd, "rb")

    def _line(self):
        line = self.r.readline(MAX_REPLY_BYTES + 1)
        if not line:
            self.gone = True
            raise CandidateError("the program exited")
        if not line.endswith(b"\n"):
            raise CandidateError("the program returned more than %d bytes" % MAX_REPLY_BYTES)
        try:
            return decode(line[:-1].decode("ascii"))
        except (UnicodeDecodeError, BoundaryError) as e:
            raise CandidateError("the program broke the call protocol: %s" % e) from None

    def loaded(self):
        try:
            reply = self._line()
        except CandidateError as e:
            self.broken = str(e)
            return "program failed to load: " + str(e)
        if reply == [0, "l"]:
            return None
        if type(reply) is list and len(reply) == 3 and reply[:2] == [0, "x"] and type(reply[2]) is str:
            self.broken = "program failed to load: " + reply[2]
        else:
            self.broken = "program failed to load: the program broke the call protocol"
        return self.broken

    def call(self, name, args, kwargs):
        if self.broken:
            raise CandidateError(self.broken)
        self.n += 1
        request = encode([self.n, name, list(args), dict(kwargs)])
        try:
            self.w.write(request.encode("ascii") + b"\n")
            self.w.flush()
            reply = self._line()
        except (OSError, CandidateError) as e:
            self.broken = e.args[0] if isinstance(e, CandidateError) else "the program exited"
            raise CandidateError(self.broken) from None
        if type(reply) is not list or len(reply) < 3 or reply[0] != self.n or type(reply[0]) is not int:
            self.broken = "the program broke the call protocol"
            raise CandidateError(self.broken)
        if reply[1] == "r" and len(reply) == 3:
            return reply[2]
        if reply[1] == "e" and len(reply) == 4 and type(reply[2]) is str and type(reply[3]) is str:
            kind = getattr(builtins, reply[2], None) if reply[2].isidentifier() else None
            if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, (StopIteration, StopAsyncIteration)):
                # (a StopIteration would silently end the loop of a test that calls through map())
                raise kind(reply[3])
            raise CandidateError("%s: %s" % (reply[2], reply[3]))
        self.broken = "the program broke the call protocol"
        raise CandidateError(self.broken)

    def close(self):
        """End the program; the signal that killed it first, if one did (None otherwise)."""
        for f in (self.w, self.r):
            try:
                f.close()
            except OSError:
                pass
        try:
            if self.gone:  # it closed its end: it is exiting, or it chose to hang (a timeout)
                self.status = os.waitpid(self.pid, 0)[1]
            else:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
        except OSError:
            pass
        if self.status is not None and os.WIFSIGNALED(self.status):
            return os.WTERMSIG(self.status)
        return None

def _die_like(sig):
    """End the harness by the signal that killed the program (SIGXCPU is the CPU limit, SIGKILL
    may be the memory limit), so that the job's outcome is that limit, not a test failure."""
    if sig is None:
        return
    try:
        if sig != _signal.SIGKILL:
            _signal.signal(sig, _signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    os._exit(128 + sig)

def _proxy(child, name):
    def call(*args, **kwargs):
        return child.call(name, args, kwargs)
    call.__name__ = call.__qualname__ = name
    return call

def _fork_candidate():
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(2, 1)
            os.dup2(req_r, 3)
            os.dup2(resp_w, 4)
            os.closerange(5, 1 << 16)
            sys.stdin = open(os.devnull)
            _serve(3, 4)
        finally:
            os._exit(0)
    os.close(req_r)
    os.close(resp_w)
    return _Candidate(pid, req_w, resp_r)

def _warm(names):
    """Import the modules the task's prompt imports before forking, so the program and the tests
    share them (a stdlib import such as typing costs ~10 ms per process)."""
    for name in names:
        try:
            __import__(name)
        except Exception:
            pass

def _compiled(spec):
    """The host's code objects for the spec's sources (``spec["bytecode"]``: the host's import
    magic and a marshalled dict), or none when they are for another Python."""
    magic, blob = spec.get("bytecode") or (None, None)
    if magic != _frozen_importlib_external.MAGIC_NUMBER:
        return {}
    try:
        return marshal.loads(blob)
    except Exception:
        return {}

def _code(codes, key, source, filename):
    """The code of one of the spec's sources: the host's, else compiled here (as the host
    leaves out what does not compile, its error is raised here, in the test it belongs to)."""
    code = codes.get(key)
    return code if code is not None else compile(source, filename, "exec")

def main():
    _protect()
    _warm(sys.argv[1:])
    spec_fd = os.open(SPEC_FILE, os.O_RDONLY)
    os.unlink(SPEC_FILE)
    os.set_inheritable(spec_fd, False)
    out = os.dup(1)
    try:
        child = _fork_candidate()
    except OSError as e:
        os.write(2, ("temper harness: cannot start the program: %s\n" % e).encode())
        return 121
    with os.fdopen(spec_fd, "rb") as f:
        spec = marshal.loads(f.read())
    nonce, names, codes = spec["nonce"], spec["names"], _compiled(spec)

    def mark(i, ok, msg=""):
        msg = " ".join(str(msg).split())[:500]
        line = "\n@@TEMPER-TEST %s %d %s %s\n" % (nonce, i, "PASS" if ok else "FAIL", msg)
        os.write(out, line.encode("utf-8", "replace"))

    failed_load = child.loaded()
    if failed_load:
        for i in range(len(names)):
            mark(i, False, failed_load)
        _die_like(child.close())
        return LOAD_FAILED_EXIT
    g = {"__name__": "__temper_tests__", "__builtins__": builtins}
    try:
        exec(_code(codes, "prelude", spec["prelude"], "prelude.py"), g)
        for name in spec["exports"]:
            g[name] = _proxy(child, name)
        if spec["mode"] == "check":
            exec(_code(codes, "module", spec["module"], "tests.py"), g)
            g["candidate"] = _proxy(child, spec["entry_point"])
    except BaseException as e:
        for i in range(len(names)):
            mark(i, False, "test setup failed: " + describe(e))
        _die_like(child.close())
        return 0
    if spec["mode"] == "statements":
        for i, code in enumerate(spec["tests"]):
            try:
                exec(_code(codes, ("test", i), code, "test_%d" % i), g)
            except BaseException as e:
                mark(i, False, describe(e))
            else:
                mark(i, True)
        _die_like(child.close())
        return 0
    done = 0
    for i, step in enumerate(spec["steps"]):
        try:
            exec(_code(codes, ("step", i), step["code"], "check"), g)
        except BaseException as e:
            if step["test"] is not None and isinstance(e, AssertionError):
                mark(step["test"], False, describe(e))
                done = step["test"] + 1
                continue
            first = step["test"] if step["test"] is not None else done
            for i in range(first, len(names)):
                mark(i, False, describe(e) if i == first else "not run: an earlier step failed")
            break
        if step["test"] is not None:
            mark(step["test"], True)
            done = step["test"] + 1
    _die_like(child.close())
    return 0

if __name__ == "__main__":
    sys.exit(main())
