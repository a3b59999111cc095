"""The agent (every sandbox's pid 1) against the job it runs, on every backend.

- Signals: no signal a job sends to pid 1 (or to the host pids of the agent and bwrap, which
  it cannot name) kills or stops the agent: the same sandbox serves the next job.
- Breaking it: whatever a job does to its agent is the job's outcome: `runtime_error` or a
  limit's status, never `sandbox_error`, exactly one sandbox retired, and no retry.
- The chain above the job: no process of it can be read or traced from the job, and none
  carries the worker's environment or working directory.
The host side of the rule (what comes back from the agent after the job was delivered) is
tested with a stand-in agent on a pipe.
"""
from __future__ import annotations

import json
import os
import secrets
import threading

import pytest

from sandbox_helpers import EXTRA_POOLS, SMALL, counts, make_backend, own_pool, run_in
from workers.sandbox import Limits, PoolConfig, SandboxError, SandboxPool
from workers.sandbox.agent_host import PipeAgentStream, run_agent_job


def sandbox_ids(pool) -> set[int]:
    """Host pids of the pool's live agents (a warm sandbox keeps its agent for life)."""
    return pool.backend.agent_pids()


# ---- signals ---------------------------------------------------------------------------------
SIGNAL_JOB = '''
import os
targets = {targets}
for pid in targets:
    if pid == os.getpid():
        continue
    try:
        os.kill(pid, {sig})
    except OSError as e:
        pass
print("sent")
'''


def test_no_signal_kills_or_stops_the_agent(backend, fresh_pool):
    v = run_in(fresh_pool, "print('warm')")
    assert v.status == "ok", v
    host = sorted(sandbox_ids(fresh_pool))
    survivors = []
    for sig in range(1, 65):  # every signal, the catchable ones and SIGKILL, SIGSTOP too
        started, retired = counts(fresh_pool)
        agents = sandbox_ids(fresh_pool)
        v = run_in(fresh_pool, SIGNAL_JOB.format(targets=[1, *host], sig=sig))
        fine = v.status == "ok" and v.stdout == b"sent\n"
        if backend != "bwrap-cold":  # the same sandbox, its agent alive, served the job and is idle again
            fine = fine and counts(fresh_pool) == (started, retired) and sandbox_ids(fresh_pool) == agents
        if not fine:
            survivors.append((sig, v.status, v.error))
    assert survivors == [], f"signals that broke the agent: {survivors}"


# ---- breaking the agent ----------------------------------------------------------------------
BREAKERS = {
    # tmpfs pages are charged to the sandbox's memory but belong to no process: the OOM killer
    # takes the biggest process, the agent (the job is a small shell)
    "oom kills the agent": (
        ["sh", "-c", "for i in 1 2 3 4; do for d in /dev/shm /tmp /work; do "
                     "head -c 15M /dev/zero > $d/$i; done; done; echo survived"],
        Limits(cpu_s=5, wall_s=20, memory_mb=96, tmpfs_mb=64), {"memory_limit"}),
    # the agent's address space limited to what it uses: its next allocations fail
    "agent's address space": (
        ["python3", "-c", "import resource, sys\n"
                          "resource.prlimit(1, resource.RLIMIT_AS, (1 << 20, 1 << 20))\n"
                          "for i in range(150):\n    sys.stdout.write('x' * 5000 + '\\n')\n"],
        Limits(cpu_s=5, wall_s=20), {"runtime_error", "ok"}),
    # the agent's open files limited to those it holds: it cannot open the next job's pipes
    "agent's open files": (
        ["python3", "-c", "import resource\nresource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))\nprint('done')\n"],
        SMALL, {"ok", "runtime_error"}),
    # the agent's file size limited: it cannot write the next job's files
    "agent's file size": (
        ["python3", "-c", "import resource\nresource.prlimit(1, resource.RLIMIT_FSIZE, (1, 1))\nprint('done')\n"],
        SMALL, {"ok", "runtime_error"}),
}


@pytest.mark.parametrize("means", list(BREAKERS))
def test_a_job_that_breaks_its_agent_gets_its_own_outcome(backend, fresh_pool, means):
    command, limits, statuses = BREAKERS[means]
    assert run_in(fresh_pool, "print('warm')", limits).status == "ok"
    started, retired = counts(fresh_pool)
    v = fresh_pool.execute({}, command, limits, domain="t")
    fresh_pool.backend.wait_idle(60)
    assert v.status != "sandbox_error", v
    assert v.status in statuses, v
    assert counts(fresh_pool)[1] == retired + 1, "not exactly one sandbox retired"
    # no retry: the only sandboxes started since are the retired one's replacement (warm) or
    # the job's own (cold)
    assert counts(fresh_pool)[0] == started + 1
    v = run_in(fresh_pool, "print('next')", limits)
    assert v.status == "ok" and v.stdout == b"next\n", v


def test_job_files_larger_than_the_sandbox_are_the_jobs_failure(backend, fresh_pool):
    limits = Limits(cpu_s=2, wall_s=5, tmpfs_mb=4)
    assert run_in(fresh_pool, "print('warm')", limits).status == "ok"
    started, retired = counts(fresh_pool)
    v = fresh_pool.execute({"big.bin": b"x" * (8 << 20)}, ["true"], limits, domain="t")
    fresh_pool.backend.wait_idle(60)
    assert v.status == "runtime_error", v
    assert "No space left" in v.error or "Errno 28" in v.error, v.error
    assert counts(fresh_pool) == (started + 1, retired + 1)


# ---- the chain above the job -----------------------------------------------------------------
PEEK = r'''
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
found = {}
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid == me:
        continue
    seen = {}
    for name in ("environ", "mem", "maps", "auxv", "stack", "syscall", "personality"):
        try:
            with open("/proc/%d/%s" % (pid, name), "rb") as f:
                seen[name] = f.read(4096).decode("latin-1")
        except OSError as e:
            seen[name] = type(e).__name__
    for name in ("cwd", "root", "exe"):
        try:
            seen[name] = os.readlink("/proc/%d/%s" % (pid, name))
        except OSError as e:
            seen[name] = type(e).__name__
    try:
        seen["fd"] = os.listdir("/proc/%d/fd" % pid)
    except OSError as e:
        seen["fd"] = type(e).__name__
    for req, what in ((16, "attach"), (0x4206, "seize")):  # PTRACE_ATTACH, PTRACE_SEIZE
        seen["ptrace " + what] = libc.ptrace(req, pid, None, None) == 0
    buf = ctypes.create_string_buffer(64)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 64)
    remote = (ctypes.c_void_p * 2)(0x400000, 64)
    seen["process_vm_readv"] = libc.process_vm_readv(pid, local, 1, remote, 1, 0) >= 0
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    seen["pidfd_getfd"] = pidfd >= 0 and libc.syscall(438, pidfd, 0, 0) >= 0  # pidfd_getfd
    found[pid] = seen
print(json.dumps(found))
'''
"""Tries to read and trace every other process a job can name (the agent is pid 1)."""

DENIED = {"PermissionError", "FileNotFoundError", "ProcessLookupError"}


def test_the_chain_above_the_job_is_out_of_reach(backend, monkeypatch, tmp_path):
    secret = "worker-secret-" + secrets.token_hex(8)
    cwd = tmp_path / ("worker-cwd-" + secrets.token_hex(8))
    cwd.mkdir()
    monkeypatch.setenv("TEMPER_WORKER_SECRET", secret)
    monkeypatch.chdir(cwd)
    config = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=1)
    with own_pool(make_backend(backend, config), config) as pool:  # started in that environment and directory
        v = pool.execute({"main.py": PEEK}, ["python3", "main.py"], SMALL, domain="t")
        assert v.status == "ok", v
        found = json.loads(v.stdout)
        assert "1" in found  # the agent
        for pid, seen in found.items():
            for name in ("environ", "mem", "maps", "auxv", "stack", "syscall", "cwd", "root", "exe", "fd"):
                assert seen[name] in DENIED, (pid, name, seen[name])
            assert not any(seen[k] for k in ("ptrace attach", "ptrace seize", "process_vm_readv", "pidfd_getfd")), seen
        assert secret.encode() not in v.stdout and str(cwd).encode() not in v.stdout
        sb = pool.backend.acquire("t", SMALL)  # a live sandbox (cold ones are gone after their job)
        try:
            chain = {pid for pid in (getattr(sb, "proc", None) and sb.proc.pid, sb.agent_pid) if pid}
            assert sb.agent_pid and chain
            for pid in chain:  # on the host: no process of the chain carries the worker's env or cwd
                environ = open(f"/proc/{pid}/environ", "rb").read()
                assert secret.encode() not in environ and str(cwd).encode() not in environ, (pid, environ)
                where = os.readlink(f"/proc/{pid}/cwd")
                assert not where.startswith(str(cwd)) and not where.startswith(os.path.dirname(__file__)), (pid, where)
        finally:
            pool.backend.release(sb, None)


# ---- the host side of the rule, with a stand-in agent ----------------------------------------
class StandIn:
    """A pipe pair playing the agent: the test writes its frames, reads what the host sent."""

    def __init__(self):
        to_agent_r, to_agent_w = os.pipe()
        from_agent_r, self.out = os.pipe()
        err_r, self.err = os.pipe()
        self.inbox = to_agent_r
        self.stream = PipeAgentStream(to_agent_w, from_agent_r, err_r)

    def frame(self, kind: int, payload: bytes = b"") -> None:
        os.write(self.out, bytes([kind]) + len(payload).to_bytes(4, "big") + payload)

    def die(self) -> None:
        for fd in (self.out, self.err, self.inbox):
            os.close(fd)

    def run(self, limits: Limits = SMALL):
        return run_agent_job(self.stream, None, {"a.py": "pass"}, ["python3", "a.py"], limits, None, "test")


def _after_the_job_arrives(agent: StandIn, then) -> threading.Thread:
    """Read the job frame's first bytes (it was delivered), then do `then`."""
    def act():
        os.read(agent.inbox, 5)
        then()
    t = threading.Thread(target=act)
    t.start()
    return t


@pytest.mark.parametrize("what", ["eof", "error frame", "garbage frame", "garbage result", "ready during the job"])
def test_an_agent_lost_after_delivery_is_the_jobs_outcome(what):
    agent = StandIn()
    then = {
        "eof": agent.die,
        "error frame": lambda: agent.frame(5, b"MemoryError()"),
        "garbage frame": lambda: os.write(agent.out, b"\x99garbage-garbage"),
        "garbage result": lambda: agent.frame(3, b"{not json"),
        "ready during the job": lambda: agent.frame(4, b"ready"),
    }[what]
    t = _after_the_job_arrives(agent, then)
    v = agent.run()
    t.join()
    assert v.status == "runtime_error", v
    assert agent.stream.lost and "broke its sandbox" in v.error, v.error
    agent.stream.close()


def test_an_agent_silent_after_delivery_is_the_jobs_timeout(monkeypatch):
    from workers.sandbox import agent_host

    monkeypatch.setattr(agent_host, "GRACE_S", 0.2)
    agent = StandIn()
    t = _after_the_job_arrives(agent, lambda: None)  # reads the job, then never answers
    v = agent.run(Limits(cpu_s=1, wall_s=0.3))
    t.join()
    assert v.status == "timeout_wall" and agent.stream.lost, v
    agent.die()
    agent.stream.close()


def test_an_agent_dead_before_delivery_is_infrastructure():
    agent = StandIn()
    agent.die()  # nothing of the job can reach it
    with pytest.raises(SandboxError):
        agent.run()
    assert not agent.stream.lost
    agent.stream.close()


def test_a_result_is_the_verdict():
    agent = StandIn()
    t = _after_the_job_arrives(agent, lambda: (agent.frame(1, b"hi\n"), agent.frame(3, b'{"killed": null, "exit_code": 0}')))
    v = agent.run()
    t.join()
    assert v.status == "ok" and v.stdout == b"hi\n" and not agent.stream.lost, v
    agent.die()
    agent.stream.close()


def test_a_sandbox_outlives_the_thread_that_started_it(backend, fresh_pool):
    """bwrap's --die-with-parent follows the thread that forked it: a sandbox started from a
    caller's thread (no idle one) was killed when that thread ended, during a later job."""
    out = []
    t = threading.Thread(target=lambda: out.append(run_in(fresh_pool, "print('first')")))
    t.start()
    t.join()
    assert out[0].status == "ok", out[0]
    started, retired = counts(fresh_pool)
    v = run_in(fresh_pool, "print('second')")
    assert v.status == "ok" and v.stdout == b"second\n", v
    if backend != "bwrap-cold":  # the same sandbox, alive
        assert counts(fresh_pool) == (started, retired)


def test_closing_the_backend_under_a_job_is_infrastructure(backend):
    """Shutting a pool down is ours, not the job's: the job in flight gets sandbox_error."""
    config = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=1)
    pool = SandboxPool(make_backend(backend, config), config)
    EXTRA_POOLS.append(pool)
    out = []
    token = "closing-" + secrets.token_hex(6)
    try:
        job = threading.Thread(target=lambda: out.append(pool.execute(
            {"main.py": "import time\ntime.sleep(60)\n"}, ["python3", "main.py", token],
            Limits(cpu_s=5, wall_s=30), domain="t")))
        job.start()
        while not any(token in c for c in _sandbox_cmdlines()):  # the job runs
            threading.Event().wait(0.01)
        pool.close()
        job.join(60)
        assert out and out[0].status == "sandbox_error" and "closed" in out[0].error, out
    finally:
        EXTRA_POOLS.remove(pool)
        pool.close()


def _sandbox_cmdlines() -> list[str]:
    """Command lines of the processes running as this test run's sandbox uids."""
    from sandbox_helpers import sandbox_uids

    return [c for cmds in sandbox_uids(own_only=True).values() for c in cmds]
