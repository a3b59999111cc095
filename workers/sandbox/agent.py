"""The in-container agent of the Docker backend, run as the container's pid 1.

Why: a `docker exec` per job costs a runc exec (~100 ms here). Instead the container's first
process is this small agent, which the host talks to over the container's attached stdin/stdout.
Being pid 1 of the container's pid namespace it cannot be killed from inside (the kernel drops
SIGKILL/SIGSTOP sent to a namespace init by its own processes, and it installs no handlers), it
marks itself non-dumpable (so the job, which runs as the same unprivileged uid, can neither
ptrace it nor read /proc/1/*), reaps every orphan as an init must, and ends each job with
`kill(-1, SIGKILL)`, which reaches every process in the container except itself.

The same agent is pid 1 of each warm bwrap sandbox (bwrap_pool.py, bwrap `--as-pid-1`). After
each job it also removes System V IPC objects and clears the shared kernel keyrings (both outlive
processes) and restores the modes of /work, /tmp and /dev/shm before reporting ready.

Protocol (big-endian): host -> agent frames `type(1) length(4) payload`: b"J" job (JSON), b"K"
kill the running job. Agent -> host frames: 1 stdout bytes, 2 stderr bytes, 3 result (JSON),
4 ready (after start and after each job's cleanup), 5 agent error text.
"""
from __future__ import annotations

AGENT_SOURCE = r'''
import base64, ctypes, json, os, resource, select, signal, struct, sys, time

try:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
except Exception:
    pass

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

def killall():
    try:
        os.kill(-1, signal.SIGKILL)  # every process but pid 1 (this agent)
    except ProcessLookupError:
        pass

def reap_all(block):
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return

libc = ctypes.CDLL(None, use_errno=True)

def wipe_ipc():
    """Remove System V IPC objects a job left (they outlive processes in the IPC namespace)."""
    for table, rm in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            lines = open("/proc/sysvipc/" + table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            ident = int(line.split()[1])
            if table == "sem":
                rm(ident, 0, 0)  # IPC_RMID
            else:
                rm(ident, 0, None)

KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)

def keyctl(*args):
    """keyctl(2) by syscall number (glibc has no wrapper); -1 where unknown or refused."""
    return libc.syscall(KEYCTL, *args) if KEYCTL else -1

def key_serials():
    """Serials of the keys this uid can see (/proc/keys), or None where it is not readable."""
    try:
        return {line.split()[0] for line in open("/proc/keys").read().splitlines() if line.strip()}
    except OSError:
        return None

def wipe_keys():
    """Clear the keyrings a job shares with the agent (session, user, user-session: keys outlive
    processes), then wait for the kernel to collect keyrings a job created for itself; if they
    stay visible, exit, so that the host retires this sandbox rather than reuse it."""
    for ring in (-3, -4, -5):  # KEY_SPEC_SESSION_KEYRING, _USER_KEYRING, _USER_SESSION_KEYRING
        keyctl(7, ring)  # KEYCTL_CLEAR
    if BASE_KEYS is None:
        return
    end = time.monotonic() + 2.0
    while not key_serials() <= BASE_KEYS:
        if time.monotonic() > end:
            os.write(2, b"temper agent: a job's keys were not collected; retiring\n")
            os._exit(3)
        time.sleep(0.01)

def wipe():
    wipe_ipc()
    wipe_keys()
    for top, mode in (("/work", 0o755), ("/tmp", 0o1777), ("/dev/shm", 0o1777)):
        try:
            os.chmod(top, mode)  # a job may have made the directory unusable for the next one
        except OSError:
            pass  # not ours (docker's tmpfs belongs to root): the job could not chmod it either
        try:
            entries = os.listdir(top)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(top, name)
            stack = [path]
            # remove depth-first without following links
            order = []
            while stack:
                p = stack.pop()
                order.append(p)
                try:
                    if os.path.isdir(p) and not os.path.islink(p):
                        os.chmod(p, 0o700)
                        stack.extend(os.path.join(p, c) for c in os.listdir(p))
                except OSError:
                    pass
            for p in reversed(order):
                try:
                    if os.path.isdir(p) and not os.path.islink(p):
                        os.rmdir(p)
                    else:
                        os.unlink(p)
                except OSError:
                    pass

def run_job(job):
    for name, b64 in job["files"].items():
        path = os.path.join("/work", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = base64.b64decode(b64)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755 if data.startswith(b"#!") else 0o644)
        write_all(fd, data)
        os.close(fd)
    stdin_data = base64.b64decode(job["stdin"]) if job.get("stdin") else b""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if stdin_data else (os.open("/dev/null", os.O_RDONLY), -1)
    lim = job["limits"]
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            os.dup2(in_r, 0); os.dup2(out_w, 1); os.dup2(err_w, 2)
            os.closerange(3, 65536)
            for res, val in ((resource.RLIMIT_CORE, (0, 0)),
                             (resource.RLIMIT_CPU, (lim["cpu"], lim["cpu"] + 1)),
                             (resource.RLIMIT_FSIZE, (lim["fsize"], lim["fsize"])),
                             (resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"])),
                             (resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))):
                resource.setrlimit(res, val)
            if lim.get("as"):  # no memory cgroup: address-space limit as the coarser backstop
                resource.setrlimit(resource.RLIMIT_AS, (lim["as"], lim["as"]))
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.chdir("/work")
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
    killed = None
    exited_at = None
    while streams:
        now = time.monotonic()
        if killed is None and now >= deadline:
            killed = "wall"
            killall()
        if exited_at is not None and now - exited_at > 2:
            break
        wl = [in_w] if in_w >= 0 and pending else []
        r, w, _ = select.select(list(streams) + [0], wl, [], 0.02)
        if w:
            try:
                n = os.write(in_w, pending[:65536])
                pending = pending[n:]
            except OSError:
                pending = pending[:0]
            if not pending:
                os.close(in_w); in_w = -1
        for fd in r:
            if fd == 0:
                for kind, payload in read_frames(False):
                    if kind == ord("K") and killed is None:
                        killed = payload.decode() or "host"
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
        if status is None:
            try:
                done, st = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, st = pid, 0
            if done == pid:
                status = st
                exited_at = time.monotonic()
                killall()  # daemons holding the pipes, anything left
        reap_all(False)
    for fd in streams:
        os.close(fd)
    if in_w >= 0:
        os.close(in_w)
    killall()
    if status is None:
        _, status = os.waitpid(pid, 0)
    reap_all(True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    result = {"killed": killed, "rusage": [cpu, usage.ru_maxrss * 1024]}
    if os.WIFSIGNALED(status):
        result["signal"] = os.WTERMSIG(status)
    else:
        result["exit_code"] = os.WEXITSTATUS(status)
    send(3, json.dumps(result).encode())

os.chdir("/work")
for ring in (-3, -4, -5):
    keyctl(0, ring, 1)  # KEYCTL_GET_KEYRING_ID, create: the keyrings every job shares exist now
BASE_KEYS = key_serials()
send(4, b"ready")
while True:
    for kind, payload in read_frames(True):
        if kind != ord("J"):
            continue
        try:
            run_job(json.loads(payload))
        except Exception as e:
            send(5, repr(e).encode())
        killall()
        reap_all(True)
        wipe()
        send(4, b"ready")
'''
"""Source of the agent, run with `python3 -c` as the container's command."""
