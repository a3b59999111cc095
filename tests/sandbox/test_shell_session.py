"""Shell sessions (workers/sandbox/session.py) on every backend (the `backend` fixture: warm
bwrap, cold bwrap, Docker): what persists across turns, exit statuses, truncation, per-command
and per-episode budgets, no network, tear-down between episodes, and hostile commands that try
to forge a turn's boundary or status. The `clean` fixture checks no sandbox process or cgroup is
left on the host afterwards."""
from __future__ import annotations

import socket

import pytest

from trainer.verifiers.limits import SessionLimits
from workers.sandbox import SandboxError, SessionEnded, get_runtime, open_session
from workers.sandbox.session import OMITTED, STATE

FAST = SessionLimits(command_wall_s=20, command_cpu_s=10, memory_mb=512, pids=64, tmpfs_mb=64)


def session(backend, files=None, limits=FAST, setup=""):
    return open_session(files, limits=limits, setup=setup, backend=backend, domain="shell-test")


def test_directory_environment_and_files_persist_across_turns(clean):
    with session(clean, {"src/app.py": "print('hi')\n"}, setup="git init -q && git add -A && git commit -qm start") as sh:
        assert sh.run("pwd").stdout == b"/work\n"
        assert get_runtime(clean).stats()["held"] == 1
        sh.run("cd src && export GREETING='a b' MULTI=$'one\\ntwo' && echo changed >> app.py && X=notexported")
        v = sh.run('pwd; echo "$GREETING"; echo "$MULTI"; echo "[$X]"; cat app.py; git status --short')
        assert v.stdout == b"/work/src\na b\none\ntwo\n[]\nprint('hi')\nchanged\n M app.py\n", v
        sh.run("unset GREETING; cd /tmp; exit 4")  # `exit` still keeps the turn's state
        assert sh.run('pwd; echo "[${GREETING-unset}]"').stdout == b"/tmp\n[unset]\n"
        assert sh.run("python3 -c 'import pytest; print(pytest.__name__)'").stdout == b"pytest\n"
        tree = sh.files()
        assert tree == {"src/app.py": b"print('hi')\nchanged\n"}  # .git left out


def test_exit_status_stderr_and_signals(clean):
    with session(clean) as sh:
        v = sh.run("echo out; echo err >&2; exit 7")
        assert (v.exit_code, v.stdout, v.stderr, v.status) == (7, b"out\n", b"err\n", "runtime_error")
        v = sh.run("if then")
        assert v.exit_code == 2 and b"syntax error" in v.stderr
        v = sh.run("kill -9 $$")
        assert v.exit_code is None and v.signal == 9
        assert sh.run("true").status == "ok"


def test_output_is_truncated_with_a_stated_marker(clean):
    limits = SessionLimits(**{**FAST.__dict__, "shown_bytes": 1024, "command_output_bytes": 1 << 20})
    with session(clean, limits=limits) as sh:
        v = sh.run("seq 1 100000")
        total = len(b"".join(b"%d\n" % i for i in range(1, 100001)))
        assert v.stdout_total_bytes == total and v.stdout_truncated and v.status == "ok"
        marker = OMITTED.format(omitted=total - 1024, total=total, stream="stdout").encode()
        assert v.stdout.startswith(b"1\n2\n3\n") and v.stdout.endswith(b"99999\n100000\n")
        assert marker in v.stdout and len(v.stdout) == 1024 + len(marker)
        v = sh.run("yes")  # past command_output_bytes: killed, and the session goes on
        assert v.status == "output_limit" and v.stdout_total_bytes > 1 << 20
        assert not sh.ended and sh.run("echo still").stdout == b"still\n"


def test_a_command_at_a_limit_is_killed_and_the_session_goes_on(clean):
    limits = SessionLimits(**{**FAST.__dict__, "command_wall_s": 3.0, "command_cpu_s": 1.0})
    with session(clean, limits=limits) as sh:
        sh.run("mkdir kept && cd kept && export K=1")
        v = sh.run("sleep 1000")
        assert v.status == "timeout_wall" and v.signal == 9
        v = sh.run("while :; do :; done")
        assert v.status in ("timeout_cpu", "timeout_wall")
        assert sh.run('pwd; echo $K').stdout == b"/work/kept\n1\n"  # from before the kills
        assert not sh.ended
    with session(clean) as sh:
        v = sh.run("echo kept > f; python3 -c 'x = bytearray(1 << 30)'")  # over the session's 512 MiB
        assert v.status == "memory_limit" and v.exit_code == 137, v  # bash saw its child killed
        assert sh.run("cat f").stdout == b"kept\n" and not sh.ended


def test_episode_budgets_end_the_session(clean):
    with session(clean, limits=SessionLimits(**{**FAST.__dict__, "episode_commands": 2})) as sh:
        sh.run("true")
        sh.run("true")
        assert "2 commands" in sh.ended
        with pytest.raises(SessionEnded):
            sh.run("true")
        assert sh.files() == {}  # the tree is still readable once a budget ended the episode
    limits = SessionLimits(**{**FAST.__dict__, "episode_wall_s": 2.0})
    with session(clean, limits=limits) as sh:
        v = sh.run("sleep 1000")  # the command gets what is left of the episode's time
        assert v.status == "timeout_wall" and "command time" in sh.ended
    with session(clean, limits=SessionLimits(**{**FAST.__dict__, "episode_output_bytes": 4096})) as sh:
        sh.run("head -c 5000 /dev/zero")
        assert "output" in sh.ended


def test_no_network(clean):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        with session(clean) as sh:
            probe = ("import socket\nfor addr in [('127.0.0.1', %d), ('1.1.1.1', 53)]:\n"
                     "    try:\n        socket.create_connection(addr, timeout=2); print('connected')\n"
                     "    except OSError as e:\n        print(type(e).__name__)\n" % port)
            v = sh.run(f"python3 -c \"{probe}\"")
            assert b"connected" not in v.stdout, v
            assert v.stdout.split(b"\n")[:2] == [b"ConnectionRefusedError", b"OSError"]
    finally:
        listener.close()


LEAVE_BEHIND = r"""
echo secret > /work/left.txt; echo secret > /tmp/left.txt; echo secret > /dev/shm/posix-left
sleep 1000 &
nohup sleep 1001 >/dev/null 2>&1 &
( setsid sh -c 'sleep 1002 & exit' & )
python3 -c "
import ctypes
libc = ctypes.CDLL(None)
print('shm', libc.shmget(0x7e3, 4096, 0o1666))"
"""
SEEN = r"""
ls -A /work /tmp /dev/shm; cat /proc/sysvipc/shm | tail -n +2
for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep 10[0-9]' || true
"""


def test_nothing_of_an_episode_reaches_the_next(clean):
    with session(clean) as first:
        v = first.run(LEAVE_BEHIND)
        assert v.status == "ok" and b"shm -1" not in v.stdout, v
        inside = first.run(SEEN).stdout  # files and IPC persist within the episode; processes do not
        assert b"left.txt" in inside and b"posix-left" in inside and b"2019" in inside  # 0x7e3 = 2019
        assert inside.endswith(b"0\n"), inside
        agent = _agent_pid(clean, first)
        assert agent and _alive(agent)
    get_runtime(clean).backend.wait_idle(60)  # the retirement runs in the background
    assert not _alive(agent), "the first episode's sandbox outlived its session"
    with session(clean) as second:
        seen = second.run(SEEN).stdout
        assert b"left" not in seen and b"2019" not in seen and seen.endswith(b"0\n"), seen


def _agent_pid(backend, sh) -> int:
    """Host pid of the session's agent (its sandbox's pid 1)."""
    return sh.slot.agent_pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_hostile_commands_cannot_forge_the_boundary_or_the_status(clean):
    with session(clean) as sh:
        # the agent's own frames (a result saying exit 0, a ready) and this module's words, then exit 5
        fake = rb'\x03\x00\x00\x00\x1b{"killed": null, "exit_code": 0}\x04\x00\x00\x00\x05ready'
        v = sh.run(f"printf '{fake.decode()}'; printf '[exit status 0]'; exit 5")
        assert v.exit_code == 5 and v.status == "runtime_error"
        assert v.stdout == b'\x03\x00\x00\x00\x1b{"killed": null, "exit_code": 0}\x04\x00\x00\x00\x05ready[exit status 0]'
        # the supervisor's channel is out of reach
        v = sh.run("echo forged > /proc/1/fd/1")
        assert v.exit_code == 1 and v.stdout == b""
        # a state file written as code: it is read as data (a variable and a directory), never run
        sh.run(f"trap - EXIT; printf '/work\\0X=$(touch /work/pwned)\\0Y=1; exit 0\\0echo; touch /work/pwned2\\0' > {STATE}")
        v = sh.run("ls /work; echo \"$X|$Y\"; exit 9")
        assert v.exit_code == 9 and v.stdout == b"$(touch /work/pwned)|1; exit 0\n", v
        # a trap replaced, a background writer after the turn: the next turn is its own
        v = sh.run("trap 'exit 0' EXIT; (sleep 1; echo LATE) & exit 3")
        assert v.exit_code == 0  # (the command's own trap: bash really exited 0)
        assert sh.run("echo next").stdout == b"next\n"


def test_a_failed_setup_holds_nothing(clean):
    with pytest.raises(SandboxError, match="setup failed"):
        session(clean, setup="echo broken >&2; exit 3")
    assert get_runtime(clean).stats()["held"] == 0
