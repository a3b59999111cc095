"""What the in-sandbox agent checks and resets after each job: source text, part of the agent.

:data:`STATE_SOURCE` runs inside the agent (workers/sandbox/agent.py, between its frame and process
helpers and its zygote and job code): the raw syscalls it needs, a process's state (rlimits,
priority, scheduling, affinity), the network namespace's sockets and counters, System V IPC,
POSIX message queues and kernel keys, the writable mounts' contents, modes, extended attributes
and times, and ``reset()``, which removes what a job left and retires the sandbox when anything
is still there (``residue()``). The agent module's docstring says why each check is there.
"""
from __future__ import annotations

STATE_SOURCE = r'''
SYSCALLS = {"x86_64": {"keyctl": 250, "ioprio_get": 252},
            "aarch64": {"keyctl": 219, "ioprio_get": 31}}.get(os.uname().machine, {})

def syscall(name, *args):
    """A syscall glibc has no wrapper for, by number; -1 where the number is unknown."""
    return libc.syscall(SYSCALLS[name], *args) if name in SYSCALLS else -1

RLIMITS = sorted({getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")})

def process_state(pid=0):
    """What another process of our uid can change about a process (us: 0) and a job would inherit."""
    sched = os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority
    return ([resource.prlimit(pid, r) for r in RLIMITS], os.getpriority(os.PRIO_PROCESS, pid), sched,
            sorted(os.sched_getaffinity(pid)), syscall("ioprio_get", 1, pid))

NET_TABLES = ("udp", "udp6", "udplite", "udplite6", "raw", "raw6", "unix", "packet")
"""Socket tables of the namespace (TCP's are left out: reading them walks the host's whole TCP
hash, 7 ms each; sockstat counts the namespace's TCP sockets, TIME_WAIT included)."""
NET_COUNTERS = ("dev", "snmp", "snmp6", "netstat")
"""Traffic counters of the namespace."""

def net_state(names):
    """The named /proc/net files: socket tables (sorted lines), counters (as they are), sockstat
    (the namespace's own TCP, UDP, RAW counts: alloc, mem and orphan are the host's)."""
    state = []
    for name in names:
        try:
            with open("/proc/net/" + name) as f:
                text = f.read()
        except OSError:
            state.append(None)
            continue
        if name in NET_TABLES:
            state.append(sorted(text.splitlines()[1:]))
        elif name in NET_COUNTERS:
            state.append(text)
        else:
            words = text.split()
            state.append([(words[i], words[i + 1]) for i in range(len(words) - 1)
                          if words[i] in ("inuse", "tw")])  # not "used": bwrap's own netlink
                                                            # socket leaves it late, after we start
    return state

NET_SOCKETS = NET_TABLES + ("sockstat", "sockstat6")

def sockets_settled():
    """Whether the namespace's sockets are back to what they were at start. A closed socket
    leaves the counts a moment after its process (freed after an RCU grace period), so this
    waits up to a second; one still there (TIME_WAIT, an fd cycle in flight) stays."""
    end = time.monotonic() + 1.0
    while net_state(NET_SOCKETS) != BASE_SOCKETS:
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True

def sysvipc():
    """(table, id) of every System V IPC object in the namespace."""
    found = []
    for table in ("shm", "sem", "msg"):
        try:
            with open("/proc/sysvipc/" + table) as f:
                found += [(table, int(line.split()[1])) for line in f.read().splitlines()[1:]]
        except OSError:
            pass
    return found

def wipe_ipc():
    """Remove System V IPC objects (they outlive processes; we are their creator, so we may)."""
    for table, ident in sysvipc():
        if table == "sem":
            libc.semctl(ident, 0, 0)  # IPC_RMID
        else:
            (libc.shmctl if table == "shm" else libc.msgctl)(ident, 0, None)

def key_serials():
    """Serials of the keys this uid can see (/proc/keys), or None where it is not readable."""
    try:
        return {line.split()[0] for line in open("/proc/keys").read().splitlines() if line.strip()}
    except OSError:
        return None

def wipe_keys():
    """Clear the keyrings a job shares with the agent (session, user, user-session: keys outlive
    processes), then wait for the kernel to collect keyrings a job created for itself."""
    for ring in (-3, -4, -5):  # KEY_SPEC_SESSION_KEYRING, _USER_KEYRING, _USER_SESSION_KEYRING
        syscall("keyctl", 7, ring)  # KEYCTL_CLEAR
    if BASE_KEYS is None:
        return
    end = time.monotonic() + 2.0
    while not key_serials() <= BASE_KEYS:
        if time.monotonic() > end:
            retire("a job's keys were not collected")
        time.sleep(0.01)

MODES = {"/tmp": 0o1777, "/dev/shm": 0o1777}
"""Modes the agent gives shared writable directories at start (bwrap makes its tmpfs 0755)."""

def writable_mounts():
    """Directories a job could change: read-write mounts outside /proc that it may write to or
    owns (so may chmod): /work, /tmp, /dev/shm, /dev/mqueue, bwrap's /dev/pts."""
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            point, opts = line.split()[1], line.split()[3].split(",")
            if "rw" not in opts or point == "/proc" or point.startswith("/proc/") or not os.path.isdir(point):
                continue
            if os.access(point, os.W_OK) or os.stat(point).st_uid == os.geteuid():
                found.append(point)
    return found

def empty(top, keep):
    """Remove everything under `top` but the entries named in `keep`, depth-first, without
    following links."""
    try:
        entries = [n for n in os.listdir(top) if n not in keep]
    except OSError:
        return
    for name in entries:
        order, stack = [], [os.path.join(top, name)]
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
                    os.unlink(p)  # a message queue too (mq_unlink)
            except OSError:
                pass

def top_state(top):
    """What a job could set on a writable directory: its entries, mode, owner, xattrs (ACLs
    too) and, where the directory is ours (so the job's too), the times it may set at will."""
    st = os.stat(top)
    try:
        xattrs = sorted(os.listxattr(top))
    except OSError:
        xattrs = []
    times = (st.st_atime_ns, st.st_mtime_ns) if st.st_uid == os.geteuid() else None
    return (sorted(os.listdir(top)), st.st_mode, st.st_uid, st.st_gid, xattrs, times)

def restore_tops():
    for top, base in BASE_TOPS.items():
        entries, mode, _, _, xattrs, times = base
        try:
            os.chmod(top, mode)
        except OSError:
            pass  # not ours (docker's tmpfs belongs to root): the job could not chmod it either
        try:
            for name in os.listxattr(top):
                if name not in xattrs:
                    os.removexattr(top, name)
        except OSError:
            pass
        empty(top, entries)
        if times is not None:
            try:
                os.utime(top, ns=times)
            except OSError:
                pass

def residue():
    """What of the last job is still here after the reset ('' when nothing)."""
    for top, base in BASE_TOPS.items():
        try:
            if top_state(top) != base:
                return top + " not as it was"
        except OSError as e:
            return "%s: %s" % (top, e)
    if sysvipc():
        return "System V IPC objects left"
    if net_state(NET_COUNTERS) != BASE_COUNTERS:
        return "the network namespace's traffic counters moved"
    if not sockets_settled():
        return "sockets left in the network namespace"
    if process_state() != BASE_PROCESS:
        return "the agent's rlimits, priority or affinity were changed"
    return ""

def reset():
    reap_all()
    zygote_renew()
    wipe_ipc()
    wipe_keys()
    restore_tops()
    left = residue()
    if left:
        retire(left)
'''
"""The agent's state checks and reset, as source (it uses the agent's ``others``, ``reap_all``,
``retire``, ``zygote_renew`` and ``zygote_changed``, defined around it)."""
