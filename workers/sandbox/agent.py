"""The in-sandbox agent: pid 1 of every sandbox (Docker containers, warm and cold bwrap).

Why: a `docker exec` per job costs a runc exec (~100 ms here), a fresh bwrap per job its
namespace setup. Instead the sandbox's first process is this small agent, which the host talks
to over the sandbox's stdin/stdout; a job is a frame and a fork+exec inside.

The job runs as the agent's uid, so the agent defends itself by what the kernel gives a
namespace init, not by permissions:
- Signals: the kernel drops a signal sent to a pid namespace's init from inside the namespace
  unless the init installed a handler for it. Python installs some (SIGINT raises
  KeyboardInterrupt) and ignores others (SIGPIPE, SIGXFSZ, which a job would inherit across
  exec), so the agent first resets every disposition to SIG_DFL.
- Memory and /proc: it marks itself non-dumpable, so the job can neither ptrace it nor read or
  write /proc/1/* (environ, mem, fd, ...).
- What a process of the same uid may still change about another (rlimits with prlimit, nice,
  scheduling policy, CPU affinity, I/O priority) is compared after each job with what it was at
  start; a job inherits those, so when one differs the agent exits and the sandbox is retired.

Warm sandboxes (`--zygote K=V...`, the jobs' environment) also hold a zygote
(:data:`~workers.sandbox.agent_zygote.ZYGOTE_SOURCE`): a second interpreter, started before any
job with the test jobs' modules and the code-test harness loaded, that forks each
`python3 -I -S -c` job instead of the agent exec'ing a fresh interpreter for it (half of a
HumanEval job's CPU was that start). It never sees a job's files.

After each job (the reset) the agent kills every process in the sandbox but itself and the
zygote (`kill(-1, SIGKILL)` where there is no zygote, else every other pid in /proc; repeated
until none is left) and checks the zygote is as it started, removes what outlives processes —
System V IPC objects, POSIX message queues, kernel keys — empties the writable mounts (/work,
/tmp, /dev/shm, /dev/mqueue; bwrap's /dev/pts) and restores their modes, extended attributes
(ACLs included) and times, then checks
that nothing is left: the writable mounts as they were, no IPC object, no socket in the
network namespace (a closed TCP connection lingers in TIME_WAIT) and its counters unchanged (a
job that sent N bytes over loopback would leave N to read), and its own process state as at
start. Anything left makes it exit instead of reporting ready, so the host retires the sandbox.
Counters the agent cannot check or reset (the next pid and inode numbers) still carry a few bits
from one job to the next in a warm sandbox; `bwrap-cold` leaves nothing at all.

Protocol (big-endian): host -> agent frames `type(1) length(4) payload`: b"J" job (a marshal
dict: files name -> bytes, stdin, command, env, limits, keep, outputs), b"K" kill the running job (payload: why).
A job with `keep` (a shell session's turn, session.py) is followed by the kill of every process
but not by the rest of the reset: its files, /tmp and IPC objects stay for the session's next
turn, and the host retires the sandbox when the session ends.
Agent -> host frames: 1 stdout bytes, 2 stderr bytes, 3 result (JSON), 4 ready (after start and
after each job's reset), 5 agent error text, 6 an output file the job asked for (read once the job's
processes are gone, before its result: agent_outputs.py).
"""
from __future__ import annotations

from .agent_outputs import OUTPUTS_SOURCE
from .agent_state import STATE_SOURCE
from .agent_zygote import BECOME, ENTER_JOB_SOURCE, PYTHON_PREFIX, SIG_DFL_SOURCE, ZYGOTE_PROGRAM
from .bwrap import ENV_ALLOW

_AGENT_HEAD = r'''
import _signal as signal, _socket, ctypes, marshal, os, resource, select, struct, sys, time
# (_signal, marshal and no json, base64 or re: the imports are most of the agent's start)
''' + SIG_DFL_SOURCE + ENTER_JOB_SOURCE + r'''libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
os.umask(0o022)

def write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]

def send(kind, data=b""):
    write_all(1, struct.pack(">BI", kind, len(data)) + data)

def retire(why):
    """Exit instead of reporting ready: the host then retires this sandbox."""
    os.write(2, ("temper agent: %s; retiring\n" % why).encode())
    os._exit(3)

inbuf = bytearray()

def read_frames(block):
    """Complete frames (type, payload) from fd 0; blocks for at least one when `block`."""
    global inbuf
    frames = []
    while True:
        while len(inbuf) >= 5:
            kind, size = inbuf[0], struct.unpack(">I", inbuf[1:5])[0]
            if len(inbuf) < 5 + size:
                break
            frames.append((kind, bytes(inbuf[5:5 + size])))
            del inbuf[:5 + size]
        if frames:
            return frames
        if not block and not select.select([0], [], [], 0)[0]:
            return frames
        chunk = os.read(0, 1 << 20)
        if not chunk:
            os._exit(0)  # host went away: nothing more to do
        inbuf += chunk

def others():
    """Pids of the sandbox but this agent and the zygote."""
    keep = (1, ZYGOTE["pid"] if zygote_alive() else -1)
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in keep]

def killall():
    if ZYGOTE is None:
        try:
            os.kill(-1, signal.SIGKILL)  # every process but pid 1 (this agent)
        except ProcessLookupError:
            pass
        return
    for pid in others():  # kill(-1) would take the zygote too
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

def reaped(pid):
    """Note a child we reaped: a dead zygote is replaced at the reset."""
    if ZYGOTE is not None and pid == ZYGOTE["pid"]:
        ZYGOTE["pid"], ZYGOTE["dead"] = -1, True  # its pid may go to a job's process, which killall must not spare

def reap_all():
    """Kill and reap until no process but us (and the zygote) is left."""
    while ZYGOTE is None:
        killall()  # again: a process forked while the last kill went round
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
    while True:
        killall()
        while True:
            try:
                done, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if done == 0:
                break
            reaped(done)
        if not others():  # zombies are listed until their parent (us, once reparented) reaps them
            return
        time.sleep(0.0005)
'''

_AGENT_TAIL = r'''
def to_json(value):
    """JSON of the result (None, names, numbers, lists of numbers, in dicts)."""
    if value is None:
        return b"null"
    if isinstance(value, dict):
        return b"{" + b", ".join(b'"%s": %s' % (k.encode(), to_json(v)) for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b", ".join(to_json(v) for v in value) + b"]"
    if isinstance(value, str):
        return b'"%s"' % value.encode()
    return repr(value).encode()

ZYGOTE = None
"""The serving zygote (agent_zygote.ZYGOTE_SOURCE): pid and pidfd, socket, env, process state at
start, dead flag; None when this sandbox has none (cold sandboxes, or it failed to start)."""

def zygote_alive():
    """Whether the serving zygote lives, by its pidfd: during a job it is the job's child, which
    may kill and reap it, and its pid may then go to another of the job's processes."""
    return not ZYGOTE["dead"] and not select.select([ZYGOTE["pidfd"]], [], [], 0)[0]

def zygote_follow(zygote, pid):
    """Make `pid` the serving zygote (the first one, or a successor the last one named)."""
    if zygote.get("pidfd", -1) >= 0:
        os.close(zygote["pidfd"])
    try:
        zygote["pid"], zygote["pidfd"], zygote["dead"] = pid, os.pidfd_open(pid), False
    except OSError:  # gone already
        zygote["pid"], zygote["pidfd"], zygote["dead"] = -1, -1, True

def zygote_start(env, socks=None):
    """Start a zygote with `env` (the jobs' environment) and wait for its preloads; None on any
    failure (jobs then fork and exec as without it). The agent keeps both ends of the socket
    (`socks`, made once), so that a zygote replaced after a job leaves the namespace's socket
    table as it was."""
    a, b = socks or _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    for end in (a, b):  # what a dead zygote or the agent left unread
        end.setblocking(False)
        try:
            while True:
                end.recv(1 << 20)
        except OSError:
            pass
        end.setblocking(True)
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open("/dev/null", os.O_RDWR)
            os.dup2(null, 0); os.dup2(null, 1)
            os.dup2(b.fileno(), 3)
            os.closerange(4, 65536)
            os.chdir("/")
            os.execvpe(PYTHON_PREFIX[0], PYTHON_PREFIX + [ZYGOTE_SOURCE], env)
        finally:
            os._exit(127)
    zygote = {"pid": -1, "pidfd": -1, "sock": a, "socks": (a, b), "env": env, "dead": True}
    hello = a.recv(16) if select.select([a], [], [], 20.0)[0] else b""
    if len(hello) == 5 and hello[:1] == b"Z":  # the preloading process hands over to its child and exits
        zygote_follow(zygote, struct.unpack(">i", hello[1:])[0])
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
    if not zygote["dead"] and zygote["pid"] != pid:
        zygote["state"] = process_state(zygote["pid"])
        return zygote
    zygote_stop(zygote)
    return None

def zygote_stop(zygote):
    if not zygote["dead"]:
        try:
            signal.pidfd_send_signal(zygote["pidfd"], signal.SIGKILL)
            os.waitid(os.P_PIDFD, zygote["pidfd"], os.WEXITED)
        except OSError:  # (ECHILD: it is a job's child yet)
            pass
    if zygote["pidfd"] >= 0:
        os.close(zygote["pidfd"])
    zygote["pid"], zygote["pidfd"], zygote["dead"] = -1, -1, True

def zygote_renew():
    """After the reset's kill: a zygote a job changed (or that died) is replaced by a fresh one."""
    global ZYGOTE
    if ZYGOTE is None or not zygote_changed():
        return
    zygote_stop(ZYGOTE)
    ZYGOTE = zygote_start(ZYGOTE["env"], ZYGOTE["socks"])

def zygote_changed():
    """Why the zygote may no longer serve jobs ('' when it may): a job can signal it (kill it,
    stop it) or change what a process of its uid may change (rlimits, priority, affinity); its
    memory and descriptors are out of reach (non-dumpable, like the agent)."""
    pid = ZYGOTE["pid"]
    try:
        if not zygote_alive() or os.waitpid(pid, os.WNOHANG)[0] != 0:
            return "the zygote died or failed"
        with open("/proc/%d/status" % pid) as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        state = status["State"].split()[0]
        if state not in ("R", "S"):
            return "the zygote is in state " + state
        if int(status["SigPnd"], 16) or int(status["ShdPnd"], 16):
            # a signal sent by the job and not yet acted on (it blocks none, and ignored ones are
            # never queued): it is about to die or stop
            return "a signal is pending for the zygote"
        if process_state(pid) != ZYGOTE["state"]:
            return "the zygote's rlimits, priority or affinity were changed"
    except OSError as e:
        return "the zygote cannot be checked: %s" % e
    return ""

def zygote_launch(command, lim, fds):
    """Have the zygote start the job: the job's pid (our child), or None when it did not answer
    (the job then forks and execs). For a code of BECOME the serving zygote becomes the job and
    names its successor, which serves from then on (mode B); else it forks the job (mode F)."""
    sock = ZYGOTE["sock"]
    pid, successor = 0, None
    try:
        mode = b"B" if command[4] in BECOME else b"F"
        sock.sendmsg([mode + marshal.dumps({"command": command, "limits": lim})],
                     [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("3i", *fds))])
        # (the agent holds both ends of the socket, so a dead zygote gives no EOF: its pidfd does)
        if select.select([sock, ZYGOTE["pidfd"]], [], [], 10.0)[0]:
            if select.select([sock], [], [], 0)[0]:  # an answer, even from a zygote that died since
                data = sock.recv(16)
                if len(data) == 8:
                    pid, successor = struct.unpack(">ii", data)  # the job's pid and the successor's
                elif len(data) == 4:
                    pid = struct.unpack(">i", data)[0]  # the job's pid, or -errno
    except OSError:
        pass
    if pid > 0:  # the job runs
        if successor is not None:
            zygote_follow(ZYGOTE, successor)
        return pid
    # No job was started (its code runs only once the pids are sent), so nothing of this job can
    # have touched the zygote: a real failure (or -errno: no successor). Kill whatever the launch
    # left before the job is forked and exec'd here instead; the zygote is replaced at the reset.
    zygote_stop(ZYGOTE)
    killall()
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return None

def run_job(job):
    for name, data in job["files"].items():
        path = os.path.join("/work", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755 if data.startswith(b"#!") else 0o644)
        write_all(fd, data)
        os.close(fd)
    stdin_data = job["stdin"] or b""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if stdin_data else (os.open("/dev/null", os.O_RDONLY), -1)
    lim = job["limits"]
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = job["command"]
    pid = None
    if (ZYGOTE is not None and not ZYGOTE["dead"] and job["env"] == ZYGOTE["env"]
            and command[:4] == PYTHON_PREFIX and len(command) >= 5):
        pid = zygote_launch(command, lim, (in_r, out_w, err_w))
    if pid is None:
        pid = os.fork()
    if pid == 0:
        try:
            _enter_job((in_r, out_w, err_w), lim)
            os.execvpe(job["command"][0], job["command"], job["env"])
        except BaseException as e:
            try:
                os.write(2, ("temper agent: cannot run %r: %s\n" % (job["command"][0], e)).encode())
            finally:
                os._exit(127)
    os.close(out_w); os.close(err_w); os.close(in_r)
    if in_w >= 0:
        os.set_blocking(in_w, False)
    pending = memoryview(stdin_data)
    deadline = time.monotonic() + lim["wall"]
    streams = {out_r: 1, err_r: 2}
    status = None
    job_usage = None
    killed = None
    exited_at = None
    try:
        pidfd = os.pidfd_open(pid)  # readable when the job exits, even after it closed its output
    except OSError:
        pidfd = -1
    while streams or status is None:
        now = time.monotonic()
        if killed is None and now >= deadline:
            killed = "wall"
            killall()
        if exited_at is not None and now - exited_at > 2:
            break
        wl = [in_w] if in_w >= 0 and pending else []
        rl = list(streams) + [0] + ([pidfd] if pidfd >= 0 and status is None else [])
        r, w, _ = select.select(rl, wl, [], 0.02)
        if w:
            try:
                n = os.write(in_w, pending[:65536])
                pending = pending[n:]
            except OSError:
                pending = pending[:0]
            if not pending:
                os.close(in_w); in_w = -1
        for fd in r:
            if fd == pidfd:
                continue  # reaped below
            if fd == 0:
                for kind, payload in read_frames(False):
                    if kind == ord("K") and killed is None:
                        killed = payload.decode() if payload in (b"cpu", b"output") else "host"
                        killall()
                continue
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            if data:
                send(streams[fd], data)
            else:
                del streams[fd]
                os.close(fd)
        while True:  # reap whatever exited; the job's own status is kept when it comes
            try:
                done, st, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if done == 0:
                break
            reaped(done)
            if done == pid:
                status, job_usage = st, ru
                exited_at = time.monotonic()
                killall()  # daemons holding the pipes, anything left
    for fd in list(streams) + [pidfd, in_w]:
        if fd >= 0:
            os.close(fd)
    killall()
    if status is None:  # nothing but the loop above reaps, so the job is still ours to wait for
        _, status, job_usage = os.wait4(pid, 0)
    reap_all()
    if job.get("outputs"):
        send_outputs(job["outputs"])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    # peak RSS of the job's own tree (RUSAGE_CHILDREN's is the largest of every job so far)
    result = {"killed": killed, "rusage": [cpu, job_usage.ru_maxrss * 1024 if job_usage else 0]}
    if os.WIFSIGNALED(status):
        result["signal"] = os.WTERMSIG(status)
    else:
        result["exit_code"] = os.WEXITSTATUS(status)
    send(3, to_json(result))

os.chdir("/work")
for ring in (-3, -4, -5):
    syscall("keyctl", 0, ring, 1)  # KEYCTL_GET_KEYRING_ID, create: the keyrings every job shares exist now
for _top, _mode in MODES.items():
    try:
        os.chmod(_top, _mode)
    except OSError:
        pass  # not ours: docker's tmpfs is root's, already 1777
if sys.argv[1:2] == ["--zygote"]:  # warm sandboxes: `--zygote K=V...` gives the jobs' environment
    ZYGOTE = zygote_start(dict(a.split("=", 1) for a in sys.argv[2:]))
BASE_KEYS = key_serials()
BASE_TOPS = {top: top_state(top) for top in writable_mounts()}
BASE_COUNTERS = net_state(NET_COUNTERS)
BASE_SOCKETS = net_state(NET_SOCKETS)
BASE_PROCESS = process_state()
send(4, b"ready")
while True:
    for kind, payload in read_frames(True):
        if kind != ord("J"):
            continue
        keep = False
        try:
            job = marshal.loads(payload)
            keep = job.get("keep") is True
            run_job(job)
        except Exception as e:
            send(5, repr(e).encode())
        if not keep:  # a shell session's turn keeps its files: the session's sandbox is never reused
            reset()
        send(4, b"ready")
'''
_AGENT_BODY = _AGENT_HEAD + STATE_SOURCE + OUTPUTS_SOURCE + _AGENT_TAIL
"""The agent's code after the zygote's: its frames and processes, its view of the sandbox's state
and its reset (:data:`~workers.sandbox.agent_state.STATE_SOURCE`), a job's output files
(:data:`~workers.sandbox.agent_outputs.OUTPUTS_SOURCE`), the zygote's control, the jobs."""

AGENT_SOURCE = "ZYGOTE_SOURCE = %r\nPYTHON_PREFIX = %r\nBECOME = %r\n" % (ZYGOTE_PROGRAM, PYTHON_PREFIX, BECOME) + _AGENT_BODY
"""Source of the agent, run with `python3 -I -S -c` as the sandbox's pid 1 (with `--zygote K=V...`
in warm sandboxes, the jobs' environment, it starts the zygote)."""


def agent_zygote_args() -> list[str]:
    """The agent's arguments that start a zygote for jobs run with the sandbox environment."""
    return ["--zygote", *(f"{k}={v}" for k, v in ENV_ALLOW.items())]
