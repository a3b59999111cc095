"""Warm bwrap sandboxes are reused within a domain: a job must not see or affect what the
previous job in the same sandbox left (files, processes, IPC objects, directory modes), the
sandbox must survive a job's attacks on its agent, and a sandbox is retired after a limit hit.

Each test uses its own pool with one warm sandbox per domain, so consecutive jobs of a domain
land in the same sandbox (checked through the agent's host pid and the use count).
"""
from __future__ import annotations

import secrets

import pytest

from sandbox_helpers import (CPU_BOUND, SMALL, bwrap_ready, daemon_program, live_pool_cgroups, own_cgroup, own_pool, require,
                             wait_no_sandbox_processes)
from workers.sandbox import Limits, PoolConfig, cgroups
from workers.sandbox.bwrap_pool import WarmBwrapBackend

CONFIG = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=1, max_uses=50)


@pytest.fixture
def pool():
    ok, reason = bwrap_ready()
    require(ok, reason)
    with own_pool(WarmBwrapBackend(CONFIG), CONFIG, idle_s=30) as pool:
        yield pool
    assert wait_no_sandbox_processes() == {}, "sandbox processes left after the pool closed"
    assert [d for d in cgroups.leftover_cgroups(only_dead_owners=False) if own_cgroup(d) and d not in live_pool_cgroups()] == []


def run(pool, program: str, limits: Limits = SMALL, domain: str = "reuse"):
    v = pool.execute({"main.py": program}, ["python3", "main.py"], limits, domain=domain)
    pool.backend.wait_idle(30)  # the reset finished: the next job gets the same sandbox
    return v


def sandbox_of(pool, domain: str = "reuse"):
    (sb,) = [s for s in pool.backend.sandboxes() if s.key[0] == domain]
    return sb


def test_the_same_sandbox_is_reused_and_each_job_starts_clean(pool):
    v = run(pool, "print('one')")
    assert v.status == "ok" and v.stdout == b"one\n", v
    first = sandbox_of(pool)
    v = run(pool, "import os\nprint(sorted(os.listdir('/work')), os.listdir('/tmp'), os.listdir('/dev/shm'))")
    assert v.status == "ok", v
    assert v.stdout == b"['main.py'] [] []\n"
    again = sandbox_of(pool)
    assert again is first and again.uses == 2 and again.agent_pid == first.agent_pid


def test_previous_jobs_files_are_gone_and_dirs_usable(pool):
    token = secrets.token_hex(8)
    writer = (
        "import os\n"
        f"for d in ('/work', '/tmp', '/dev/shm'):\n"
        f"    open(d + '/.hidden-{token}', 'w').write('{token}')\n"
        f"    os.makedirs(d + '/deep/er', exist_ok=True)\n"
        f"    open(d + '/deep/er/f-{token}', 'w').write('{token}')\n"
        "    os.chmod(d + '/deep/er', 0)\n"
        "    os.chmod(d + '/deep', 0o500)\n"
        "os.mkfifo('/tmp/fifo')\n"
        "os.symlink('/etc/ld.so.cache', '/work/link')\n"
        "os.chmod('/work', 0o500)\n"  # the next job could not write its files
        "os.chmod('/tmp', 0)\n"
    )
    v = run(pool, writer)
    assert v.status == "ok", v
    first = sandbox_of(pool)
    reader = (
        "import os\n"
        "for d in ('/work', '/tmp', '/dev/shm'):\n"
        "    for root, dirs, files in os.walk(d):\n"
        "        print(root, dirs, files)\n"
        "open('/tmp/mine', 'w').write('x')\n"
        "open('/work/mine', 'w').write('x')\n"
        "print('writable')\n"
    )
    v = run(pool, reader)
    assert sandbox_of(pool) is first
    assert v.status == "ok", v
    assert token.encode() not in v.stdout and b"deep" not in v.stdout and b"fifo" not in v.stdout
    assert b"link" not in v.stdout and v.stdout.endswith(b"writable\n")


def test_previous_jobs_processes_are_gone(pool):
    token = "lurker-" + secrets.token_hex(6)
    daemon = daemon_program(token, "import time\nwhile True: time.sleep(0.01)", close_fds=True, settle_s=0.3,
                            done="left a daemon")
    v = run(pool, daemon, Limits(cpu_s=5, wall_s=8))
    assert v.status == "ok", v
    first = sandbox_of(pool)
    if first.cgroup is not None:  # after the reset only bwrap, the agent and its zygote remain in the sandbox
        assert first.cgroup.pids_current() <= pool.backend.resident
    assert wait_no_sandbox_processes(token) == {}
    lister = (
        "import os\n"
        "me = os.getpid()\n"
        "for p in sorted(int(d) for d in os.listdir('/proc') if d.isdigit()):\n"
        "    try:\n        cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n    except OSError as e:\n        cmd = repr(e).encode()\n"
        "    print(p, p == me, cmd)\n"
    )
    v = run(pool, lister, Limits(cpu_s=5, wall_s=8))
    assert sandbox_of(pool) is first
    assert v.status == "ok", v
    assert token.encode() not in v.stdout
    lines = v.stdout.decode().splitlines()
    pids = [line.split()[0] for line in lines]
    zygote = {line.split()[0] for line in lines if "_become" in line} - {"1"}  # the zygote (the agent embeds its source)
    assert len(zygote) == 1
    assert set(pids) <= {"1"} | zygote | {line.split()[0] for line in lines if " True " in line}, v.stdout


def test_previous_jobs_sysv_ipc_objects_are_gone(pool):
    maker = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "shm = libc.shmget(0x5eed, 1 << 20, 0o1000 | 0o666)\n"  # IPC_CREAT
        "sem = libc.semget(0x5eee, 1, 0o1000 | 0o666)\n"
        "msg = libc.msgget(0x5eef, 0o1000 | 0o666)\n"
        "print(shm >= 0, sem >= 0, msg >= 0)\n"
    )
    v = run(pool, maker)
    assert v.status == "ok" and v.stdout == b"True True True\n", v
    first = sandbox_of(pool)
    v = run(pool, "for t in ('shm', 'sem', 'msg'):\n    print(t, len(open('/proc/sysvipc/' + t).read().splitlines()) - 1)\n")
    assert sandbox_of(pool) is first
    assert v.stdout == b"shm 0\nsem 0\nmsg 0\n", v


def test_previous_jobs_keys_are_gone(pool):
    token = "temper-key-" + secrets.token_hex(6)
    adder = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for ring in (-4, -5, -3):\n"  # user, user session, session keyring
        f"    print(libc.syscall(248, b'user', b'{token}-%d' % -ring, b'secret', 6, ring) > 0)\n"  # add_key
        "print(open('/proc/keys').read())\n"
    )
    v = run(pool, adder)
    assert v.status == "ok", v
    assert token.encode() in v.stdout, v.stdout  # the keys were really added
    first = sandbox_of(pool)
    v = run(pool, "print(open('/proc/keys').read())")
    assert sandbox_of(pool) is first
    assert v.status == "ok", v
    assert token.encode() not in v.stdout, v.stdout


def test_keys_in_a_jobs_own_session_keyring_are_gone(pool):
    token = "temper-own-" + secrets.token_hex(6)
    adder = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.syscall(250, 1, None) > 0)\n"  # KEYCTL_JOIN_SESSION_KEYRING: a new anonymous one
        f"print(libc.syscall(248, b'user', b'{token}', b'secret', 6, -3) > 0)\n"
    )
    v = run(pool, adder)
    assert v.status == "ok" and v.stdout == b"True\nTrue\n", v
    v = run(pool, "print(open('/proc/keys').read())")
    assert v.status == "ok", v
    assert token.encode() not in v.stdout, v.stdout  # collected before reuse, or the sandbox retired


def test_job_cannot_kill_or_read_the_agent(pool):
    program = (
        "import os, signal\n"
        "for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):\n"
        "    try:\n        os.kill(1, sig)\n    except OSError as e:\n        print('kill', e)\n"
        "for f in ('environ', 'mem', 'maps'):\n"
        "    try:\n        open('/proc/1/' + f, 'rb').read(10)\n        print('READ', f)\n    except OSError as e:\n        print(f, type(e).__name__)\n"
        "print('done', flush=True)\n"
        "os.kill(-1, signal.SIGKILL)\n"
    )
    v = run(pool, program)
    assert v.status in ("ok", "runtime_error"), v
    assert b"READ" not in v.stdout, v.stdout
    first = sandbox_of(pool)
    v = run(pool, "print('still here')")
    assert v.status == "ok" and v.stdout == b"still here\n", v
    assert sandbox_of(pool) is first and first.uses == 2


def test_root_dev_and_etc_are_read_only(pool):
    program = (
        "for p in ('/x', '/dev/x', '/etc/x', '/usr/x', '/proc/x'):\n"
        "    try:\n        open(p, 'w').write('1')\n        print('WROTE', p)\n    except OSError as e:\n        print('no', p)\n"
    )
    v = run(pool, program)
    assert v.status == "ok", v
    assert b"WROTE" not in v.stdout, v.stdout


@pytest.mark.parametrize("program, limits, status", [
    ("while True:\n    pass\n", CPU_BOUND, "timeout_cpu"),
    ("import time\ntime.sleep(100)\n", Limits(cpu_s=5, wall_s=1), "timeout_wall"),
    ("x = bytearray(400 << 20)\n", Limits(cpu_s=5, wall_s=10, memory_mb=128), "memory_limit"),
    ("print('y' * (1 << 20))\n", Limits(output_bytes=4096), "output_limit"),
])
def test_sandbox_is_retired_after_a_limit(pool, program, limits, status):
    v = run(pool, "print('warm')", limits)
    assert v.status == "ok", v
    first = sandbox_of(pool)
    v = run(pool, program, limits)
    assert v.status == status, v
    assert first not in pool.backend.sandboxes()
    v = run(pool, "print('fresh')", limits)
    assert v.status == "ok", v
    assert sandbox_of(pool) is not first


def test_memory_limit_is_the_jobs_own(pool):
    limits = Limits(cpu_s=5, wall_s=10, memory_mb=128)
    v = run(pool, "x = bytearray(90 << 20)\nprint('ok')\n", limits)
    assert v.status == "ok", v
    v = run(pool, "x = bytearray(160 << 20)\nprint('ok')\n", limits)
    assert v.status == "memory_limit", v


def test_retired_after_max_uses():
    ok, reason = bwrap_ready()
    require(ok, reason)
    config = PoolConfig(global_limit=1, domain_limit=1, warm_per_domain=1, max_uses=2)
    with own_pool(WarmBwrapBackend(config), config, idle_s=30) as pool:
        seen = []
        for _ in range(4):
            v = run(pool, "print(1)")
            assert v.status == "ok", v
            seen.append(sandbox_of(pool).agent_pid)
        # two jobs per sandbox: the third job ran in a fresh one
        assert len(set(seen)) >= 2


def test_domains_never_share_a_sandbox(pool):
    assert run(pool, "open('/work/a', 'w').write('a')", domain="one").status == "ok"
    v = run(pool, "import os\nprint(os.listdir('/work'))", domain="two")
    assert v.status == "ok" and v.stdout == b"['main.py']\n", v
    one, two = sandbox_of(pool, "one"), sandbox_of(pool, "two")
    assert one is not two and one.uid != two.uid
