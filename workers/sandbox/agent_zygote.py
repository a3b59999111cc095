"""The zygote of warm sandboxes, and what the agent shares with it: source text, part of the agent.

:data:`ZYGOTE_PROGRAM` is the program the agent (workers/sandbox/agent.py) starts as its zygote
before any job; the agent module's docstring says what the zygote may and may not hold, and
docs/sandbox.md what a job can do to it. :data:`SIG_DFL_SOURCE` and :data:`ENTER_JOB_SOURCE`
run in both.
"""
from __future__ import annotations

from trainer.verifiers.code_harness import BOOTSTRAP, HARNESS, HARNESS_DIGEST, HARNESS_MODULE

SIG_DFL_SOURCE = r'''
for _sig in signal.valid_signals():  # SIG_DFL everywhere (see the module docstring and ZYGOTE_SOURCE)
    if _sig not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(_sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
'''
"""Source that resets every signal's disposition to SIG_DFL, run first by the agent (so that the
kernel's protection of a namespace's init applies) and by the zygote (so that a job it forks has
the dispositions a job started by exec has); it leaves ``_sig`` bound."""

ENTER_JOB_SOURCE = r'''
def _enter_job(fds, lim):
    """In a job's new process (forked by the agent or the zygote): a session of its own, the job's
    pipes as stdin, stdout and stderr and no other descriptor (the zygote's socket neither), its
    rlimits (an address-space limit as the coarser backstop where there is no memory cgroup),
    and /work as its directory."""
    os.setsid()
    os.dup2(fds[0], 0); os.dup2(fds[1], 1); os.dup2(fds[2], 2)
    os.closerange(3, 65536)
    for res, val in ((resource.RLIMIT_CORE, (0, 0)),
                     (resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1)),
                     (resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"])),
                     (resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"])),
                     (resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))):
        resource.setrlimit(res, val)
    if lim.get("as"):
        resource.setrlimit(resource.RLIMIT_AS, (lim["as"], lim["as"]))
    os.chdir("/work")
'''
"""Source of ``_enter_job``, which the agent and the zygote both run in a job's process before
the job's code (the agent then execs the command; the zygote runs its code in place)."""

ZYGOTE_SOURCE = r'''
import _signal as signal, _socket, ctypes, marshal, os, resource, struct, sys
''' + SIG_DFL_SOURCE + ENTER_JOB_SOURCE + r'''
_libc = ctypes.CDLL(None, use_errno=True)
if _libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 0, or no zygote at all
    os._exit(120)

_PRECOMPILED = {}

def _preload():
    """What every job would otherwise build for itself after the fork, paying a page fault for
    each page it writes: the AST types (built by a process's first compile(), 2 ms), PRELOAD,
    PRELOAD_SOURCES and the code of PRECOMPILED (as `-c` compiles it)."""
    compile("", "<zygote>", "exec")
    for source in PRECOMPILED:
        try:
            _PRECOMPILED[source] = compile(source, "<string>", "exec")
        except Exception:
            pass
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:
            pass
    for name, (digest, source) in PRELOAD_SOURCES.items():
        try:
            module = type(sys)(name)
            exec(compile(source, name + ".py", "exec"), module.__dict__)
            module.TEMPER_DIGEST = digest
            sys.modules[name] = module
        except Exception:
            pass

_preload()
del _preload, _sig

def _exit_status(code):
    """The exit status of SystemExit(code), as the interpreter gives it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:
        pass
    return 1

def _become(req, fds):
    """In the job's process: take its streams, limits and directory, then run its code as
    `python3 -I -S -c CODE ARGS...` would, and exit as that interpreter would."""
    command, lim = req["command"], req["limits"]
    try:
        _enter_job(fds, lim)  # the zygote's socket closed too: nothing leads back to it
        # as exec would leave it: dumpable again, and the dispositions a fresh interpreter sets
        # on the agent's SIG_DFL ones (SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt)
        _libc.prctl(4, 1, 0, 0, 0)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = ["-c"] + list(command[5:])
        main = type(sys)("__main__")
        sys.modules["__main__"] = main
        code = _PRECOMPILED.get(command[4]) or compile(command[4], "<string>", "exec")
    except BaseException as e:
        os.write(2, ("temper agent: cannot run %r: %s\n" % (command[0], e)).encode())
        os._exit(127)
    try:
        exec(code, main.__dict__)
        status = 0
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:
        _type, _value, _tb = sys.exc_info()
        _tb = _tb.tb_next if _tb is not None else None  # from the job's own code on
        sys.excepthook(_type, _value.with_traceback(_tb), _tb)
        del _type, _value, _tb
        status = 1
    try:  # what the interpreter does before it exits: wait for threads, run atexit, flush
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        if "atexit" in sys.modules:
            sys.modules["atexit"]._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)

def _request():
    """Take the request waiting on the socket: its payload (after the mode byte) and its three
    descriptors; exit when the agent went away."""
    msg, anc, _flags, _addr = _sock.recvmsg(1 << 20, _socket.CMSG_SPACE(3 * 4))
    if not msg:
        os._exit(0)
    fds = []
    for level, kind, data in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += struct.unpack("%di" % (len(data) // 4), data[:len(data) - len(data) % 4])
    return msg[1:], fds

def _fork_through(msg, fds):
    """Mode F: an intermediate process forks the job and exits, so that the job is the agent's
    child and has none of its own (a fresh interpreter's equal); the zygote serves on."""
    try:
        between = os.fork()
    except OSError as e:
        _sock.send(struct.pack(">i", -e.errno))
        between = None
    if between == 0:
        go_r, go_w = os.pipe()
        try:
            job = os.fork()
        except OSError as e:
            _sock.send(struct.pack(">i", -e.errno))
            os._exit(1)
        if job == 0:
            os.close(go_w)
            if os.read(go_r, 1) != b"g":  # the agent never learnt this pid: it runs the job itself
                os._exit(127)
            _become(marshal.loads(msg), fds)
        _sock.send(struct.pack(">i", job))
        os.write(go_w, b"g")  # only now may the job's code run (it could kill this process)
        os._exit(0)
    for fd in fds:
        os.close(fd)
    if between:
        os.waitpid(between, 0)

_sock = _socket.socket(fileno=3)
if os.fork():  # the process that preloaded hands over to a child: a job may be a zygote that took
    os._exit(0)  # a request, and its CPU time (which RLIMIT_CPU counts) must start near zero
_sock.send(b"Z" + struct.pack(">i", os.getpid()))
while True:
    try:
        _mode = _sock.recv(1, _socket.MSG_PEEK)  # a request is there; not taken yet
    except InterruptedError:
        continue
    if not _mode:
        os._exit(0)  # the agent went away
    if _mode != b"B":
        _fork_through(*_request())
        continue
    # Mode B: this zygote becomes the job. Its successor is forked before the request is read, so
    # that it holds nothing of it; it waits until the request is taken, then serves the next one.
    _taken_r, _taken_w = os.pipe()
    try:
        _next = os.fork()
    except OSError as e:
        _next = -e.errno
    if _next == 0:
        os.close(_taken_w)
        os.read(_taken_r, 1)  # EOF once the request is taken
        os.close(_taken_r)
        continue
    os.close(_taken_r)
    try:
        _msg, _fds = _request()
    finally:
        os.close(_taken_w)
    if _next < 0:  # no successor: the agent forks and execs this job itself
        _sock.send(struct.pack(">i", _next))
        for _fd in _fds:
            os.close(_fd)
        continue
    _sock.send(struct.pack(">ii", os.getpid(), _next))  # before any of the job's code runs
    _become(marshal.loads(_msg), _fds)
'''
"""The zygote: an interpreter a warm sandbox's agent starts once, before any job, with the
jobs' environment and what a job would otherwise build for itself after the fork, a page fault
for each page it writes, already made: the AST types, the modules most test jobs import
(:data:`PRELOAD`), the code-test harness (:data:`PRELOAD_SOURCES`) and its bootstrap's code
(:data:`PRECOMPILED`). For a job whose command is `python3 -I -S -c CODE ARGS...` it forks an
intermediate process that forks the job and exits (mode F: so the job is the agent's child, as
one it forks itself), and the job takes its pipes (passed as SCM_RIGHTS), its limits and /work,
then runs CODE as that command line would. For the code-test harness's bootstrap (:data:`BECOME`,
mode B) the zygote that takes the request becomes the job itself, the agent's child already:
before it reads the request it forks its successor, which waits until the request is taken and
then serves the next one; it sends the agent its own pid and the successor's, and only then
becomes the job. That is a fork and an exit less (0.7 ms of a HumanEval job's 8), and the job has
one child it did not start (the successor, its child until it ends, then the agent's), which the
trusted harness never waits for; any other code might (a fresh interpreter has no child), so it
keeps mode F. Both save the interpreter's
start and the imports (about half of a HumanEval job's CPU) while holding nothing of any job: a
serving zygote runs no job code (the one that took a request becomes that job and serves no
other), never receives a job's files (only its command line and limits), is non-dumpable (no
ptrace, no /proc/<pid>/mem or fd), and after every job the reset checks the serving one is
alive, not stopped and has the rlimits, priority, scheduling and affinity the first had; a job
that changed any of that gets it replaced after its own verdict. The agent follows the serving
zygote by a pidfd, not its pid alone: a job may kill and reap its child, the successor, whose
pid could then go to another process. Cold sandboxes (one job each) start none."""

PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "string", "heapq", "bisect")
"""Modules the zygote imports before it serves jobs (what HumanEval-style prompts import)."""

PYTHON_PREFIX = ["python3", "-I", "-S", "-c"]
"""Commands the zygote runs, `python3 -I -S -c CODE ARGS...` (the code-test harness's,
trainer.verifiers.code_harness.COMMAND), and its own command line."""

PRELOAD_SOURCES = {HARNESS_MODULE: (HARNESS_DIGEST, HARNESS)}
"""Modules the zygote defines from source before it serves jobs, each tagged ``TEMPER_DIGEST``
(the SHA-256 of its source): the code-test harness, whose job runs the zygote's copy when it is
the very source the job carries (code_harness.BOOTSTRAP) instead of loading and defining it."""

PRECOMPILED = (BOOTSTRAP,)
"""`-c` codes the zygote compiles before it serves jobs (a job whose code is one of them runs the
compiled code): the code-test harness's bootstrap."""

BECOME = (BOOTSTRAP,)
"""`-c` codes whose job the serving zygote becomes (mode B): trusted code that waits for no child
it did not start (the harness waits for its candidate by pid)."""

ZYGOTE_PROGRAM = ("PRELOAD = %r\nPRELOAD_SOURCES = %r\nPRECOMPILED = %r\n" % (PRELOAD, PRELOAD_SOURCES, PRECOMPILED)
                  + ZYGOTE_SOURCE)
"""The zygote's whole source, its preloads first (agent_host.ZYGOTE_CMDLINE finds it by them)."""
