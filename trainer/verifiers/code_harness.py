"""Python unit tests against hostile code: the harness, the job it runs in, and its verdict.

The program under test is optimised against its verifier, so it never shares an interpreter, a
stack or a writable channel with the code that judges it. One sandbox job holds two processes:

* the **harness** (trusted, :data:`HARNESS`): the job's command. It makes itself non-dumpable
  (so no process of the same uid can ptrace it or open its ``/proc`` files), opens the test spec
  file and unlinks it, and only then forks;
* the **candidate**: the forked child. Before any of the program's code runs it drops every file
  descriptor but two pipes to the harness, points its stdin at ``/dev/null`` and its stdout at
  the job's stderr, then loads ``solution.py`` and serves calls.

The harness reads the tests only after the fork, so they exist in its memory alone. It runs the
trusted prelude (the task's prompt: helpers such as HumanEval's ``poly``) and the tests in its own
namespace; every name the tests take from the program (``candidate``, the entry point, free names
of the tests that neither the prelude nor the builtins define) is a proxy: each call crosses the
process boundary as data (:func:`encode` / strict decoding: ``None``, ``bool``, ``int``,
``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``,
``frozenset``; exact types only, iterators become lists), so a returned object whose ``__eq__``
always says True, a patched ``builtins.exec`` or ``compile``, a frame walk or a forged marker
line reaches nothing. The harness alone writes the verdict markers, to its stdout, each with the
job's nonce; the host accepts only markers with its nonce, for every test, from a job that
exited 0. What the candidate can do to the harness (kill it, stop it, exhaust limits) ends the
job as a failure, a timeout or a limit, never a pass.

>>> job = build_job("def inc(x):\\n    return x + 1\\n", ["assert inc(1) == 2"], nonce="0" * 32)
>>> sorted(job.files), job.command[:4], job.names, job.exports
(['.temper_tests', 'solution.py', 'temper_harness.bin', 'temper_harness.py'], ['python3', '-I', '-S', '-c'], ['test_0'], ['inc'])
>>> parse_results(b"@@TEMPER-TEST " + b"0" * 32 + b" 0 PASS \\n@@TEMPER-TEST " + b"1" * 32 + b" 0 FAIL x\\n", job)
[('test_0', True, '')]
>>> exported_names(["assert abs(f(x)) < 1 and g(2)"], "x = 3\\n", None)
['f', 'g']
"""
from __future__ import annotations

import ast
import builtins
import functools
import marshal
import re
import secrets
from dataclasses import dataclass
from typing import Any

SPEC_FILE = ".temper_tests"
"""Job file holding the tests and the nonce (marshal); the harness unlinks it before it forks."""
HARNESS_FILE = "temper_harness.py"
"""Job file holding the harness's source."""
BYTECODE_FILE = "temper_harness.bin"
"""Job file holding the harness compiled by this process (the import magic, then marshal):
compiling ~400 lines costs ~4 ms of CPU per job; the sandbox's Python runs the bytecode when its
magic matches and compiles the source otherwise."""
PROGRAM_FILE = "solution.py"
"""Job file holding the program under test."""
BOOTSTRAP = (
    "import marshal, sys, _frozen_importlib_external as e\n"
    f"f = open({BYTECODE_FILE!r}, 'rb')\n"
    "code = marshal.load(f) if f.read(4) == e.MAGIC_NUMBER else None\n"
    f"exec(code or compile(open({HARNESS_FILE!r}).read(), {HARNESS_FILE!r}, 'exec'), {{'__name__': '__main__'}})\n"
)
"""Runs the harness's bytecode, or its source when the bytecode is for another Python."""
COMMAND = ["python3", "-I", "-S", "-c", BOOTSTRAP]
"""``-I``: no environment, user site or script directory on the path; ``-S``: no site-packages."""
LOAD_FAILED_EXIT = 3
"""The harness's exit code when the program failed to load (the job is then a runtime_error)."""
MAX_REPLY_BYTES = 8 << 20
"""Longest encoded value the candidate may return from one call."""

HARNESS = r'''
import builtins, marshal, os, sys, _json

def _protect():
    """Non-dumpable: same-uid processes can neither ptrace this one nor open its /proc files.
    (prctl through _ctypes itself: the ctypes package costs 5-10 ms to import.)"""
    import _ctypes

    class Int(_ctypes._SimpleCData):
        _type_ = "i"

    class Libc:
        _handle = _ctypes.dlopen(None)

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL
        _restype_ = Int

    prctl = Function(("prctl", Libc()))
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
        with open(__PROGRAM__, encoding="utf-8") as f:
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
        self.w = os.fdopen(wfd, "wb")
        self.r = os.fdopen(rfd, "rb")

    def _line(self):
        line = self.r.readline(__MAX_REPLY__ + 1)
        if not line:
            raise CandidateError("the program exited")
        if not line.endswith(b"\n"):
            raise CandidateError("the program returned more than __MAX_REPLY__ bytes")
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
        for f in (self.w, self.r):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass

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

def main():
    _protect()
    _warm(sys.argv[1:])
    spec_fd = os.open(__SPEC__, os.O_RDONLY)
    os.unlink(__SPEC__)
    os.set_inheritable(spec_fd, False)
    out = os.dup(1)
    try:
        child = _fork_candidate()
    except OSError as e:
        os.write(2, ("temper harness: cannot start the program: %s\n" % e).encode())
        return 121
    with os.fdopen(spec_fd, "rb") as f:
        spec = marshal.loads(f.read())
    nonce, names = spec["nonce"], spec["names"]

    def mark(i, ok, msg=""):
        msg = " ".join(str(msg).split())[:500]
        line = "\n@@TEMPER-TEST %s %d %s %s\n" % (nonce, i, "PASS" if ok else "FAIL", msg)
        os.write(out, line.encode("utf-8", "replace"))

    failed_load = child.loaded()
    if failed_load:
        for i in range(len(names)):
            mark(i, False, failed_load)
        child.close()
        return __LOAD_FAILED__
    g = {"__name__": "__temper_tests__", "__builtins__": builtins}
    try:
        exec(compile(spec["prelude"], "prelude.py", "exec"), g)
        for name in spec["exports"]:
            g[name] = _proxy(child, name)
        if spec["mode"] == "check":
            exec(compile(spec["module"], "tests.py", "exec"), g)
            g["candidate"] = _proxy(child, spec["entry_point"])
    except BaseException as e:
        for i in range(len(names)):
            mark(i, False, "test setup failed: " + describe(e))
        child.close()
        return 0
    if spec["mode"] == "statements":
        for i, code in enumerate(spec["tests"]):
            try:
                exec(compile(code, "test_%d" % i, "exec"), g)
            except BaseException as e:
                mark(i, False, describe(e))
            else:
                mark(i, True)
        child.close()
        return 0
    done = 0
    for step in spec["steps"]:
        try:
            exec(compile(step["code"], "check", "exec"), g)
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
    child.close()
    return 0

sys.exit(main())
'''.replace("__SPEC__", repr(SPEC_FILE)).replace("__PROGRAM__", repr(PROGRAM_FILE)).replace(
    "__MAX_REPLY__", str(MAX_REPLY_BYTES)).replace("__LOAD_FAILED__", str(LOAD_FAILED_EXIT))
"""Source of the harness (run as ``python3 -I -S temper_harness.py`` in the sandbox)."""

MARKER_RE = re.compile(rb"^@@TEMPER-TEST ([0-9a-f]{32}) (\d+) (PASS|FAIL) ?(.*)$", re.MULTILINE)
_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__name__", "__builtins__", "__file__", "__doc__"}


@dataclass(frozen=True)
class CodeTestJob:
    """One sandbox job that runs a program against tests, and what reading its verdict needs."""

    files: dict[str, str | bytes]
    """``solution.py``, the harness and the spec file."""
    command: list[str]
    """The harness's command line."""
    nonce: str
    """32 hex digits; only markers carrying it count."""
    names: list[str]
    """Test names, in order."""
    exports: list[str]
    """Names the tests call in the program (each a proxy in the harness)."""


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name a piece of code binds anywhere (assignments, defs, imports, parameters...)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return bound


def _parse(source: str, what: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise ValueError(f"{what} does not parse: {e}") from None


def trusted_prelude(prompt: str | None) -> str:
    """The task's prompt as code the harness may run: helpers and stubs it defines. A prompt that
    ends in a bare signature gets a ``pass`` body; one that does not parse at all is dropped."""
    if not prompt:
        return ""
    for source in (prompt, prompt.rstrip() + "\n    pass\n"):
        try:
            ast.parse(source)
        except SyntaxError:
            continue
        return source
    return ""


def imported_modules(source: str) -> list[str]:
    """Top-level modules a piece of trusted code imports (the harness imports them before it
    forks, so both of its processes share them).

    >>> imported_modules("from typing import List\\nimport math, os.path\\nfrom . import x")
    ['math', 'os', 'typing']
    """
    if not source:
        return []
    names = set()
    for node in ast.walk(_parse(source, "the prompt")):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if n.isidentifier())


def exported_names(tests: list[str], prelude: str, entry_point: str | None) -> list[str]:
    """Names the tests take from the program: free names of the tests that neither the tests,
    the prelude nor the builtins define, plus the entry point. A program cannot shadow ``abs``."""
    defined = _bound_names(_parse(prelude, "the prompt")) if prelude else set()
    free: set[str] = set()
    for i, source in enumerate(tests):
        tree = _parse(source, f"test {i}")
        loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        free |= loads - _bound_names(tree)
    names = free - defined - _BUILTIN_NAMES - {"candidate"}
    if entry_point:
        names.add(entry_point)
    return sorted(names)


def check_steps(test_code: str, entry_point: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Split ``def check(candidate)``'s body into steps; each step holding an assert is a test."""
    tree = _parse(test_code, "test code")
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        raise ValueError("test code with entry_point must define check(candidate)")
    param = check.args.args[0].arg
    names: list[str] = []
    steps: list[dict[str, Any]] = []
    for stmt in check.body:
        code = ast.unparse(stmt)
        if param != "candidate":
            code = f"{param} = candidate\n" + code
        idx = None
        if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            idx = len(names)
            names.append(f"check:L{stmt.lineno}")
        steps.append({"code": code, "test": idx})
    if not names:
        raise ValueError("check(candidate) contains no assert: nothing could ever pass")
    return names, steps


def build_job(
    program: str,
    tests: list[str] | str,
    *,
    entry_point: str | None = None,
    prelude: str | None = None,
    test_names: list[str] | None = None,
    nonce: str | None = None,
) -> CodeTestJob:
    """The job that runs ``program`` against ``tests`` (see the module docstring).

    ``tests``: a list of snippets (each one test, e.g. ``"assert add(1, 2) == 3"``), or a test
    module (HumanEval style) defining ``check(candidate)``, with ``entry_point`` naming the
    function passed as ``candidate``; each statement of check's body holding an assert is one
    test. ``prelude``: trusted code from the task (its prompt) run in the harness first.
    """
    if not isinstance(program, str):
        raise TypeError(f"program must be str, got {type(program).__name__}")
    nonce = nonce or secrets.token_hex(16)
    if not re.fullmatch(r"[0-9a-f]{32}", nonce):
        raise ValueError("nonce must be 32 lower-case hex digits")
    prelude = trusted_prelude(prelude)
    if isinstance(tests, str):
        if entry_point is None:
            raise ValueError("a test module string needs entry_point (the function check() receives)")
        names, steps = check_steps(tests, entry_point)
        spec: dict[str, Any] = {"mode": "check", "module": tests, "entry_point": entry_point, "steps": steps}
        exports = exported_names([tests], prelude, entry_point)
    elif isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        names = list(test_names) if test_names else [f"test_{i}" for i in range(len(tests))]
        if len(names) != len(tests):
            raise ValueError(f"test_names has {len(names)} names for {len(tests)} tests")
        spec = {"mode": "statements", "tests": list(tests)}
        exports = exported_names(tests, prelude, entry_point)
    else:
        raise ValueError("tests must be a non-empty list of code strings or a test module string")
    spec.update(nonce=nonce, names=names, prelude=prelude, exports=exports)
    files: dict[str, str | bytes] = {HARNESS_FILE: HARNESS, BYTECODE_FILE: harness_bytecode(), PROGRAM_FILE: program,
                                     SPEC_FILE: marshal.dumps(spec)}
    return CodeTestJob(files, [*COMMAND, *imported_modules(prelude)], nonce, names, exports)


@functools.lru_cache(maxsize=1)
def harness_bytecode() -> bytes:
    """This Python's import magic and the harness's code object (see BYTECODE_FILE)."""
    import importlib.util

    return importlib.util.MAGIC_NUMBER + marshal.dumps(compile(HARNESS, HARNESS_FILE, "exec"))


def job_from_files(files: dict[str, Any]) -> CodeTestJob | None:
    """The job a set of files was built as (None when they hold no test spec)."""
    raw = files.get(SPEC_FILE)
    if raw is None:
        return None
    spec = marshal.loads(raw if isinstance(raw, bytes) else raw.encode("latin-1"))
    return CodeTestJob(dict(files), list(COMMAND), spec["nonce"], list(spec["names"]), list(spec["exports"]))


def parse_results(stdout: bytes | str, job: CodeTestJob) -> list[tuple[str, bool, str]]:
    """``(name, passed, message)`` per test from the markers carrying the job's nonce; a test
    without a marker did not pass."""
    if isinstance(stdout, str):
        stdout = stdout.encode("utf-8", "replace")
    nonce = job.nonce.encode()
    seen: dict[int, tuple[str, bool, str]] = {}
    for m in MARKER_RE.finditer(stdout):
        if m.group(1) != nonce:
            continue
        i = int(m.group(2))
        if i >= len(job.names) or i in seen:
            continue
        seen[i] = (job.names[i], m.group(3) == b"PASS", m.group(4).decode("utf-8", "replace").rstrip("\r"))
    return [seen.get(i, (name, False, "no result: the program ended before this test ran")) for i, name in enumerate(job.names)]
