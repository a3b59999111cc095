"""A job leaves nothing for the next job in the same sandbox, on every backend.

One job plants every kind of residue we know of: files, fifos, sockets and links in every
writable mount (modes, extended attributes, ACLs and times of the mounts themselves too),
System V IPC objects, POSIX message queues, kernel keys, processes (a setsid double-forked daemon
that ignores every signal it can, a stopped child) holding TCP, UDP and abstract unix sockets.
The next job, in the same warm sandbox, observes the sandbox the way a job can and must see
exactly what a job sees in a fresh one. What the agent cannot undo (a TCP connection in
TIME_WAIT, its own rlimits, priority, scheduling, affinity or I/O priority changed by a job of
the same uid) must retire the sandbox instead. On `bwrap-cold` every job has a fresh sandbox
anyway: the same checks hold trivially there.
"""
from __future__ import annotations

import json
import secrets

import pytest

from sandbox_helpers import counts, run_in

OBSERVE = r'''
import ctypes, json, os, resource, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
TOKEN, PORT = sys.argv[1], int(sys.argv[2])
obs = {}
writable = sorted({line.split()[1] for line in open("/proc/self/mounts")
                   if os.path.isdir(line.split()[1]) and os.access(line.split()[1], os.W_OK)
                   and not line.split()[1].startswith("/proc")})
obs["writable"] = writable
times = {}
for top in sorted(set(writable) | {"/work", "/tmp", "/dev/shm", "/dev/mqueue"}):
    entries = []
    for root, dirs, files in os.walk(top):
        entries += [os.path.join(root, n) for n in dirs + files]
    st = os.stat(top)
    try:
        xattrs = sorted(os.listxattr(top))
    except OSError as e:
        xattrs = type(e).__name__
    obs["dir " + top] = {"entries": sorted(set(entries) - {"/work/main.py"}), "mode": oct(st.st_mode),
                         "owner": st.st_uid == os.getuid(), "xattrs": xattrs}
    times[top] = [st.st_atime_ns, st.st_mtime_ns]
obs["sysvipc"] = {t: open("/proc/sysvipc/" + t).read().splitlines()[1:] for t in ("shm", "sem", "msg")}
obs["mq_open"] = libc.mq_open(("/mq-" + TOKEN).encode(), os.O_RDONLY) >= 0
try:
    keys = open("/proc/keys").read()
    obs["keys"] = [TOKEN in keys, len(keys.splitlines())]
except OSError as e:
    obs["keys"] = type(e).__name__
me = os.getpid()
obs["processes"] = sorted(open("/proc/%s/cmdline" % p, "rb").read().decode(errors="replace")
                          for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me))
obs["net"] = {}
for name in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6", "unix", "dev", "snmp", "snmp6", "netstat"):
    try:
        obs["net"][name] = open("/proc/net/" + name).read().splitlines()[1:]
        if name == "unix":  # less the addresses and inodes: the agent's socket to its zygote has new ones in each sandbox
            obs["net"][name] = [" ".join(l.split()[1:6] + l.split()[7:]) for l in obs["net"][name]]
    except OSError as e:
        obs["net"][name] = type(e).__name__
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("127.0.0.1", PORT))
        obs["bind %d" % kind] = True
    except OSError as e:
        obs["bind %d" % kind] = type(e).__name__
    s.close()
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0" + TOKEN)
    obs["abstract"] = "connected"
except OSError as e:
    obs["abstract"] = type(e).__name__
obs["rlimits"] = {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")}
obs["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
obs["sched"] = [os.sched_getscheduler(0), os.sched_getparam(0).sched_priority]
obs["affinity"] = sorted(os.sched_getaffinity(0))
obs["ioprio"] = libc.syscall(252, 1, 0)  # ioprio_get(IOPRIO_WHO_PROCESS, self)
umask = os.umask(0)
obs["umask"] = umask
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
obs["signals"] = {k: status[k].strip() for k in ("SigBlk", "SigIgn")}
obs["env"] = dict(os.environ)
obs["cwd"] = os.getcwd()
print(json.dumps({"obs": obs, "times": times}))
'''
"""What a job can see of the state a previous job might have left (argv: token, port)."""

PLANT = r'''
import ctypes, json, os, resource, signal, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
TOKEN, PORT = sys.argv[1], int(sys.argv[2])
MAGIC = 1_234_567_890_123_456_789
done = {}

def attempt(name, fn):
    try:
        fn()
        done[name] = True
    except OSError as e:
        done[name] = type(e).__name__

libc.shmget.restype = libc.semget.restype = libc.msgget.restype = ctypes.c_int
ids = [libc.shmget(0x5EED, 4096, 0o1000 | 0o600), libc.shmget(0, 4096, 0o600),  # IPC_CREAT, IPC_PRIVATE
       libc.semget(0x5EEE, 1, 0o1000 | 0o600), libc.msgget(0x5EEF, 0o1000 | 0o600)]
done["sysvipc"] = all(i >= 0 for i in ids)
msg = struct.pack("l", 1) + TOKEN.encode()
libc.msgsnd(ids[3], msg, len(TOKEN), 0)
done["mq"] = libc.mq_open(("/mq-" + TOKEN).encode(), os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
for ring in (-4, -5, -3):  # user, user session, session keyring: add_key
    done["key %d" % ring] = libc.syscall(248, b"user", ("%s%d" % (TOKEN, ring)).encode(), b"x", 1, ring) > 0
done["own keyring"] = libc.syscall(250, 1, None) > 0 and libc.syscall(248, b"user", TOKEN.encode(), b"x", 1, -3) > 0

writable = sorted({line.split()[1] for line in open("/proc/self/mounts")
                   if os.path.isdir(line.split()[1]) and os.access(line.split()[1], os.W_OK)
                   and not line.split()[1].startswith("/proc")})
ACL = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, 0xFFFFFFFF)
                                     for tag, perm in ((1, 7), (4, 7), (0x20, 7)))
for top in writable:
    def files(top=top):
        open(top + "/.hidden-" + TOKEN, "w").write(TOKEN)
    def tree(top=top):
        os.makedirs(top + "/d-" + TOKEN + "/deeper")
        open(top + "/d-" + TOKEN + "/deeper/f", "w").write(TOKEN)
        os.chmod(top + "/d-" + TOKEN + "/deeper", 0)
        os.chmod(top + "/d-" + TOKEN, 0o500)
    def specials(top=top):
        os.mkfifo(top + "/fifo-" + TOKEN)
        os.symlink("/etc/ld.so.cache", top + "/link-" + TOKEN)
        socket.socket(socket.AF_UNIX).bind(top + "/sock-" + TOKEN)
    attempt("files " + top, files)
    attempt("tree " + top, tree)
    attempt("specials " + top, specials)
    attempt("xattr " + top, lambda top=top: os.setxattr(top, "user.temper", TOKEN.encode()))
    attempt("acl " + top, lambda top=top: os.setxattr(top, "system.posix_acl_default", ACL))
    attempt("times " + top, lambda top=top: os.utime(top, ns=(MAGIC, MAGIC)))
    attempt("mode " + top, lambda top=top: os.chmod(top, 0o500 if top == "/work" else 0))

r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: no parent in the job, every catchable signal ignored
        for sig in range(1, 65):
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):
                pass
        tcp = socket.socket(); tcp.bind(("127.0.0.1", PORT)); tcp.listen()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", PORT))
        unix = socket.socket(socket.AF_UNIX); unix.bind("\0" + TOKEN); unix.listen()
        os.write(w, b"up")
        while True:
            signal.pause()
    os._exit(0)
done["daemon"] = os.read(r, 2) == b"up"
child = os.fork()
if child == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
done["stopped child"] = os.WIFSTOPPED(os.waitpid(child, os.WUNTRACED)[1])
print(json.dumps(done))
'''
"""Leaves everything it can behind (argv: token, port)."""

MAGIC = 1_234_567_890_123_456_789


def observe(pool, token: str, port: int) -> dict:
    v = run_in(pool, OBSERVE.replace("sys.argv[1], int(sys.argv[2])", f"{token!r}, {port}"))
    assert v.status == "ok", v
    return json.loads(v.stdout)


def test_the_next_job_sees_nothing_of_the_last(backend, fresh_pool):
    token, port = "res" + secrets.token_hex(6), 20000 + secrets.randbelow(20000)
    before = observe(fresh_pool, token, port)
    started = counts(fresh_pool)
    v = run_in(fresh_pool, PLANT.replace("sys.argv[1], int(sys.argv[2])", f"{token!r}, {port}"))
    assert v.status == "ok", v
    planted = json.loads(v.stdout)
    musts = ["files /work", "files /tmp", "files /dev/shm", "tree /tmp", "specials /tmp", "files /dev/mqueue",
             "sysvipc", "mq", "daemon", "stopped child"]
    if backend != "docker":  # bwrap's mounts are the sandbox uid's; Docker's seccomp refuses keyctl
        musts += ["mode /tmp", "times /tmp", "mode /dev/pts", "key -3", "key -4", "key -5", "own keyring"]
    for must in musts:
        assert planted[must] is True, (must, planted)  # the residue is really there
    if backend != "bwrap-cold":  # the agent cleaned it all up: the same sandbox serves on
        assert counts(fresh_pool) == started, "the sandbox was retired: its reset failed"
    after = observe(fresh_pool, token, port)
    assert after["obs"] == before["obs"]
    assert token not in json.dumps(after)
    for top, stamps in after["times"].items():
        assert MAGIC not in stamps, f"{top} keeps the previous job's times"


AGENT_STATE = {
    "tcp TIME_WAIT": (
        "import socket\n"
        "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
        "cli = socket.create_connection(srv.getsockname()); conn, _ = srv.accept()\n"
        "cli.close(); conn.recv(1); conn.close(); srv.close()\n"  # the client closes first
        "print(any(l.split()[3] == '06' for l in open('/proc/net/tcp').read().splitlines()[1:]))\n"),
    "loopback traffic": (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for _ in range(123):\n    s.sendto(b'x' * 45, ('127.0.0.1', 9))\n"  # counters: 123 datagrams
        "print(True)\n"),
    "agent's open files": "import resource\nresource.prlimit(1, resource.RLIMIT_NOFILE, (200, 200))\nprint(True)\n",
    "agent's stack": "import resource\nresource.prlimit(1, resource.RLIMIT_STACK, (1 << 20, resource.prlimit(1, resource.RLIMIT_STACK)[1]))\nprint(True)\n",
    "agent's cpu time": "import resource\nresource.prlimit(1, resource.RLIMIT_CPU, (1, 1))\nprint(True)\n",
    "agent's nice": "import os\nos.setpriority(os.PRIO_PROCESS, 1, 19)\nprint(True)\n",
    "uid's nice": "import os\nos.setpriority(os.PRIO_USER, 0, 19)\nprint(True)\n",
    "agent's scheduler": "import os\nos.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))\nprint(True)\n",
    "agent's affinity": (
        "import os\ncpus = os.sched_getaffinity(1)\n"
        "os.sched_setaffinity(1, {min(cpus)})\nprint(len(cpus) > 1)\n"),
    "agent's io priority": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.syscall(251, 1, 1, 3 << 13) == 0)\n"),  # ioprio_set(WHO_PROCESS, 1, CLASS_IDLE)
}
"""Programs that leave what the agent cannot undo; each prints whether it managed to."""


@pytest.mark.parametrize("kind", list(AGENT_STATE))
def test_what_the_agent_cannot_undo_retires_the_sandbox(fresh_pool, kind):
    token, port = "res" + secrets.token_hex(6), 20000 + secrets.randbelow(20000)
    before = observe(fresh_pool, token, port)
    retired = counts(fresh_pool)[1]
    v = run_in(fresh_pool, AGENT_STATE[kind])
    assert v.status == "ok", v
    if v.stdout == b"True\n":  # it did change something: that sandbox is gone
        assert counts(fresh_pool)[1] == retired + 1
    after = observe(fresh_pool, token, port)
    assert after["obs"] == before["obs"]
