"""The zygote of warm sandboxes (agent_zygote.ZYGOTE_SOURCE): a job it forks is a fresh interpreter's
equal, holds nothing of earlier jobs, and a job that tampers with it gets it replaced.

A job whose command is `python3 -I -S -c CODE ARGS...` (the code-test harness's) is forked by
the zygote instead of exec'd. What such a job observes of itself (argv, __main__, cwd, parent,
environment, rlimits, open descriptors, signal dispositions, flags, exit statuses, tracebacks)
is compared with the same command on `bwrap-cold`, whose sandboxes have no zygote, so every
job there is a fresh interpreter.
"""
from __future__ import annotations

import json
import secrets

import pytest

from sandbox_helpers import SMALL, counts, make_backend, own_pool, ready, require
from workers.sandbox import Limits, PoolConfig
from trainer.verifiers import code_harness
from workers.sandbox.agent import PYTHON_PREFIX

SELF = r'''
import json, os, resource, signal, sys
fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
obs = {
    "argv": sys.argv, "main": __name__, "main_is_module": sys.modules["__main__"].__dict__ is globals(),
    "cwd": os.getcwd(), "ppid": os.getppid(), "env": dict(os.environ),
    "sid_is_pid": os.getsid(0) == os.getpid(),
    "rlimits": {n: resource.getrlimit(getattr(resource, n))
                for n in ("RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CORE")},
    "fds": fds[:3] + [len(fds)],
    "signals": {s: str(signal.getsignal(s)) for s in range(1, signal.NSIG)
                if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) not in (signal.SIG_DFL, None)},
    "isolated": [sys.flags.isolated, sys.flags.no_site, sys.flags.safe_path],
    "path0": sys.path[0], "stdin": sys.stdin.read(), "umask": os.umask(0o022),
    "dumpable": __import__("ctypes").CDLL(None).prctl(3, 0, 0, 0, 0),
}
print(json.dumps(obs, sort_keys=True))
'''
"""Prints what a job can see of its own process."""

EXITS = {
    "sys.exit(3)": (3, b""),
    "sys.exit('bad input')": (1, b"bad input\n"),
    "sys.exit(None)": (0, b""),
    "raise ValueError('boom')": (1, b"ValueError: boom\n"),
    "import os; os._exit(7)": (7, b""),
    "print('partial', end='')": (0, b""),
}
"""Job bodies and the exit status and the end of stderr a fresh interpreter gives them."""


def test_the_harness_command_is_the_one_the_zygote_serves():
    assert code_harness.COMMAND[:4] == PYTHON_PREFIX


def python_command(code: str, *args: str) -> list[str]:
    return [*PYTHON_PREFIX, code, *args]


@pytest.fixture(params=["bwrap", "docker"])
def warm_and_cold(request):
    """A warm pool of `request.param` (sandboxes with a zygote) and a cold bwrap pool (none)."""
    for name in (request.param, "bwrap-cold"):
        ok, reason = ready(name)
        require(ok, reason)
    config = PoolConfig(global_limit=2, domain_limit=2, warm_per_domain=1, max_uses=10_000)
    with own_pool(make_backend(request.param, config), config) as warm, \
            own_pool(make_backend("bwrap-cold", config), config) as cold:
        yield warm, cold


def run(pool, command: list[str], stdin: bytes | None = None, limits: Limits = SMALL):
    v = pool.execute({}, command, limits, stdin, domain="zygote")
    pool.backend.wait_idle(60)
    return v


def test_a_forked_job_sees_what_a_fresh_interpreter_sees(warm_and_cold):
    warm, cold = warm_and_cold
    command = python_command(SELF, "one", "two words")
    seen = []
    for pool in (warm, cold, warm):  # the warm sandbox's second job too
        v = run(pool, command, stdin=b"from the host")
        assert v.status == "ok", v
        seen.append(json.loads(v.stdout))
    assert seen[0] == seen[1] == seen[2]
    assert seen[0]["argv"] == ["-c", "one", "two words"] and seen[0]["ppid"] == 1 and seen[0]["stdin"] == "from the host"


@pytest.mark.parametrize("body", list(EXITS))
def test_exit_statuses_and_tracebacks_are_a_fresh_interpreters(warm_and_cold, body):
    warm, cold = warm_and_cold
    code, tail = EXITS[body]
    got = []
    for pool in (warm, cold):
        v = run(pool, python_command("import sys\n" + body + "\n"))
        assert v.exit_code == code and v.stderr.endswith(tail), (pool.backend.name, v)
        got.append((v.exit_code, v.stdout, v.stderr))
    assert got[0] == got[1]  # the traceback shows the job's own frames only


def test_the_zygote_holds_nothing_of_an_earlier_job(warm_and_cold):
    warm, cold = warm_and_cold
    token = secrets.token_hex(8)
    plant = ("import sys, typing, re, collections\n"
             f"typing.PLANTED = {token!r}; re.compile({token!r}); collections.PLANTED = 1\n"
             f"sys.modules['planted_{token}'] = typing\n")
    assert run(warm, python_command(plant)).status == "ok"
    look = ("import sys, typing, re, collections\n"
            f"print(hasattr(typing, 'PLANTED'), hasattr(collections, 'PLANTED'), any('{token}' in str(k) for k in re._cache),"
            f" any('{token}' in name for name in sys.modules))\n")
    started = counts(warm)[0]
    v = run(warm, python_command(look))
    assert v.stdout == b"False False False False\n", v
    assert v.stdout == run(cold, python_command(look)).stdout
    assert counts(warm)[0] == started  # the same warm sandbox served it


FIND_ZYGOTE = r'''
import ctypes, os, resource, signal
def zygote():
    for n in os.listdir("/proc"):
        if n.isdigit() and int(n) not in (1, os.getpid()):
            try:
                if b"_become" in open("/proc/%s/cmdline" % n, "rb").read():
                    return int(n)
            except OSError:
                pass
z = zygote()
libc = ctypes.CDLL(None, use_errno=True)
'''
"""Prelude of the tampering jobs: `z` is the zygote's pid in the sandbox."""

TAMPER = {
    "kill": "os.kill(z, signal.SIGKILL)",
    "stop": "os.kill(z, signal.SIGSTOP)",
    "terminate by a default signal": "os.kill(z, signal.SIGUSR1)",
    "rlimit": "resource.prlimit(z, resource.RLIMIT_NOFILE, (16, 16))",
    "nice": "os.setpriority(os.PRIO_PROCESS, z, 19)",
    "scheduler": "os.sched_setscheduler(z, os.SCHED_IDLE, os.sched_param(0))",
    "io priority": "assert libc.syscall(251, 1, z, 3 << 13) == 0",
}
"""What a job of the sandbox's uid can do to the zygote: each gets the zygote replaced at the reset."""

UNREACHABLE = {
    "ptrace": "assert libc.ptrace(16, z, None, None) == 0",  # PTRACE_ATTACH
    "memory": "open('/proc/%d/mem' % z, 'rb').read(1)",
    "descriptors": "os.listdir('/proc/%d/fd' % z)",
    "environment": "open('/proc/%d/environ' % z, 'rb').read()",
}
"""What it must not be able to do at all (the zygote is non-dumpable)."""


ZYGOTE_STATE = FIND_ZYGOTE + r'''
state = open("/proc/%d/stat" % z).read().rsplit(")", 1)[1].split()[0]
state = "S" if state == "R" else state  # (it may still be on its way back to waiting, after forking this job)
print(state, [resource.prlimit(z, getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")],
      os.getpriority(os.PRIO_PROCESS, z), os.sched_getscheduler(z), sorted(os.sched_getaffinity(z)),
      libc.syscall(252, 1, z))
'''
"""Prints what a job of the sandbox's uid can see of the zygote's state."""


@pytest.mark.parametrize("kind", list(TAMPER))
def test_a_job_that_tampers_with_the_zygote_gets_it_replaced(warm_and_cold, kind):
    warm, _ = warm_and_cold
    before = run(warm, python_command(ZYGOTE_STATE))
    assert before.status == "ok" and before.stdout.startswith(b"S "), before
    started = counts(warm)
    v = run(warm, python_command(FIND_ZYGOTE + TAMPER[kind] + "\nprint('done')\n"))
    assert (v.status, v.stdout) == ("ok", b"done\n"), v  # the job's own verdict, never an infrastructure one
    after = run(warm, python_command(ZYGOTE_STATE))  # the same sandbox, with a fresh zygote
    assert after.stdout == before.stdout, (kind, before.stdout, after.stdout)
    assert counts(warm) == started
    v = run(warm, python_command("print(6 * 7)"))
    assert (v.status, v.stdout) == ("ok", b"42\n"), v


@pytest.mark.parametrize("kind", list(UNREACHABLE))
def test_a_job_cannot_reach_into_the_zygote(warm_and_cold, kind):
    warm, _ = warm_and_cold
    probe = FIND_ZYGOTE + "try:\n    " + UNREACHABLE[kind] + "\n    print('reached')\nexcept (OSError, AssertionError) as e:\n    print('refused')\n"
    v = run(warm, python_command(probe))
    assert (v.status, v.stdout) == ("ok", b"refused\n"), v


def test_other_commands_are_exec_d(warm_and_cold):
    """Only `python3 -I -S -c` goes through the zygote: another command line is exec'd as given."""
    warm, _ = warm_and_cold
    v = run(warm, ["python3", "-c", "import sys; print(sys.flags.isolated, sys.flags.no_site, 'typing' in sys.modules)"])
    assert v.stdout == b"0 0 False\n", v
    v = run(warm, ["sh", "-c", "echo $0; exit 4", "sh-job"])
    assert (v.exit_code, v.stdout) == (4, b"sh-job\n"), v


def test_a_job_that_kills_the_zygote_at_once_runs_once(warm_and_cold):
    """Its code runs only after the agent has its pid, so the agent never takes the zygote's
    death for a failed start and runs the job a second time beside the first."""
    warm, _ = warm_and_cold
    once = FIND_ZYGOTE + (
        "fd = os.open('/work/runs', os.O_CREAT | os.O_APPEND | os.O_WRONLY)\n"
        "os.write(fd, b'x')\n"
        "os.kill(z, signal.SIGKILL)\n"
        "try:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\n"
        "import time; time.sleep(0.3)\n"
        "print(len(open('/work/runs').read()))\n")
    for _ in range(5):
        v = run(warm, python_command(once))
        assert (v.status, v.stdout) == ("ok", b"1\n"), v


def test_a_harness_job_runs_the_zygotes_harness_only_when_it_is_its_own(warm_and_cold):
    """A warm sandbox's zygote holds the code-test harness already imported (agent_zygote.PRELOAD_SOURCES);
    the job's bootstrap runs that copy only when its digest is the one the job's command carries,
    else the harness the job ships. A shipped harness that reports every test the other way round
    shows which one ran."""
    warm, cold = warm_and_cold
    job = code_harness.build_job("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(1) == 3"])
    flipped = code_harness.HARNESS.replace('"PASS" if ok else "FAIL"', '"FAIL" if ok else "PASS"')
    assert flipped != code_harness.HARNESS
    files = dict(job.files, **{code_harness.HARNESS_FILE: flipped, code_harness.BYTECODE_FILE: b"\0\0\0\0"})
    other = [*job.command[:4], job.command[4].replace(code_harness.HARNESS_DIGEST, "0" * 64), *job.command[5:]]
    assert other != job.command

    def passed(pool, command):
        v = pool.execute(files, command, SMALL, domain="zygote")
        pool.backend.wait_idle(60)
        assert v.status == "ok", v
        return [ok for _, ok, _ in code_harness.parse_results(v.stdout, job)]

    assert passed(warm, job.command) == [True, False]  # the zygote's harness
    assert passed(warm, other) == [False, True]  # another digest: the job's own (flipped) harness
    assert passed(cold, job.command) == [False, True]  # no zygote: the job's own harness


def test_only_the_harness_job_is_served_by_the_zygote_becoming_it(warm_and_cold):
    """For the code-test harness's bootstrap (agent_zygote.BECOME) the serving zygote becomes the
    job and its successor serves on; any other `python3 -I -S -c` job is forked (it has no child
    it did not start, as a fresh interpreter), and the zygote that forked it serves on."""
    warm, cold = warm_and_cold
    no_child = "import os\ntry:\n    os.waitpid(-1, os.WNOHANG)\n    print('a child')\nexcept ChildProcessError:\n    print('no child')\n"
    for pool in (warm, cold):
        v = run(pool, python_command(no_child))
        assert (v.status, v.stdout) == ("ok", b"no child\n"), v
    serving = FIND_ZYGOTE + "print(z)\n"
    first = run(warm, python_command(serving)).stdout
    assert first == run(warm, python_command(serving)).stdout  # mode F: the same zygote serves on
    job = code_harness.build_job("def f(x):\n    return x + 1\n", ["assert f(1) == 2"])
    v = warm.execute(job.files, job.command, SMALL, domain="zygote")
    warm.backend.wait_idle(60)
    assert [ok for _, ok, _ in code_harness.parse_results(v.stdout, job)] == [True], v
    after = run(warm, python_command(serving)).stdout
    assert after.strip().isdigit() and after != first  # mode B: the zygote became the job; its successor serves
