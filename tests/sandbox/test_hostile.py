"""Hostile inputs, one test per case, on both backends (the `backend` fixture).

Each test checks the verdict's status, and the `clean` fixture checks afterwards that no sandbox
process and no execution cgroup is left on the host. `healthy()` checks the backend still runs a
normal job correctly after the attack.
"""
from __future__ import annotations

import json
import marshal
import secrets
from pathlib import Path

import pytest

from workers.sandbox import Limits, execute, python_test_job
from workers.sandbox.testjob import SPEC_FILE

from sandbox_helpers import CPU_BOUND, SMALL, daemon_program, wait_no_sandbox_processes

FAILED = {"runtime_error", "timeout_cpu", "timeout_wall", "memory_limit"}


def run(backend, program: str, limits: Limits = SMALL, stdin: bytes | None = None, domain: str = "hostile"):
    return execute({"main.py": program}, ["python3", "main.py"], limits, stdin, backend=backend, domain=domain)


def healthy(backend) -> None:
    v = run(backend, "print(sum(range(10)))")
    assert v.status == "ok", v
    assert v.stdout == b"45\n"


def test_fork_bomb(clean):
    v = run(clean, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    assert v.status in FAILED, v
    healthy(clean)


def test_thread_bomb(clean):
    v = run(clean, "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()\n")
    assert v.status in FAILED, v
    assert b"can't start new thread" in v.stderr or v.status.startswith("timeout")
    healthy(clean)


def test_nested_user_namespace_then_fork_bomb(clean):
    program = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.unshare(0x10000000) == 0:\n"  # CLONE_NEWUSER
        "    print('USERNS-CREATED', flush=True)\n"
        "else:\n"
        "    print('USERNS-REFUSED', ctypes.get_errno(), flush=True)\n"
        "while True:\n    os.fork()\n"
    )
    v = run(clean, program)
    assert b"USERNS-CREATED" not in v.stdout
    assert b"USERNS-REFUSED" in v.stdout
    assert v.status in FAILED, v
    healthy(clean)


def test_64_gib_allocation(clean):
    v = run(clean, "x = bytearray(64 << 30)\nprint('allocated')\n")
    assert v.status == "memory_limit", v
    assert b"allocated" not in v.stdout


def test_touching_more_than_the_memory_limit(clean):
    v = run(clean, "x = bytearray(400 << 20)\nprint('allocated')\n", Limits(cpu_s=4, wall_s=8, memory_mb=128))
    assert v.status == "memory_limit", v


@pytest.mark.parametrize("where", ["/dev/shm", "/tmp", "/work"])
def test_filling_tmpfs(clean, where):
    token = secrets.token_hex(8)
    program = (
        "import os\n"
        f"i = 0\nwhile True:\n    with open('{where}/fill-{token}-%d' % i, 'wb') as f:\n"
        "        f.write(b'x' * (1 << 20))\n    i += 1\n"
    )
    v = run(clean, program)
    assert v.status in ("runtime_error", "memory_limit"), v
    assert b"No space left" in v.stderr or v.status == "memory_limit", v.stderr[-500:]
    assert not list(Path("/tmp").glob(f"fill-{token}-*")), "sandbox tmpfs wrote to the host /tmp"
    assert not list(Path("/dev/shm").glob(f"fill-{token}-*"))
    healthy(clean)


def test_200_mb_stdout_without_newline(clean):
    v = run(clean, "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * (1 << 20))\n")
    assert v.status == "output_limit", v
    assert v.stdout_truncated and len(v.stdout) == SMALL.output_bytes
    assert v.stdout_total_bytes > SMALL.output_bytes
    healthy(clean)


def test_stderr_flood(clean):
    v = run(clean, "import sys\nwhile True:\n    sys.stderr.write('E' * 4096 + '\\n')\n")
    assert v.status == "output_limit", v
    assert v.stderr_truncated and len(v.stderr) == SMALL.output_bytes


def test_more_than_64_kib_while_parent_waits(clean):
    program = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', \"import sys; sys.stdout.write('z' * 200000)\"])\n"
        "sys.exit(p.wait())\n"
    )
    v = run(clean, program)
    assert v.status == "ok", v
    assert v.stdout == b"z" * 200000 and v.stdout_total_bytes == 200000


def test_invalid_utf8_output(clean):
    v = run(clean, "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\xc3(' * 10)\nsys.stderr.buffer.write(b'\\x80')\n")
    assert v.status == "ok", v
    assert v.stdout == b"\xff\xfe\xc3(" * 10 and v.stderr == b"\x80"
    json.dumps(v.to_dict())  # JSON-safe despite the bytes


def test_busy_loop(clean):
    v = run(clean, "while True:\n    pass\n", CPU_BOUND)
    assert v.status == "timeout_cpu", v
    healthy(clean)


def test_sleeping_forever(clean):
    v = run(clean, "import time\ntime.sleep(10 ** 6)\n", Limits(cpu_s=5, wall_s=1.5))
    assert v.status == "timeout_wall", v
    healthy(clean)


def test_input_without_stdin(clean):
    v = run(clean, "print(input())\n")
    assert v.status == "runtime_error", v
    assert b"EOFError" in v.stderr


def test_stdin_is_delivered(clean):
    v = run(clean, "print(input()[::-1])\n", stdin=b"olleh\n")
    assert v.status == "ok" and v.stdout == b"hello\n", v


def test_ignoring_sigterm_and_catching_base_exception(clean):
    program = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "while True:\n    try:\n        time.sleep(100)\n    except BaseException:\n        pass\n"
    )
    v = run(clean, program, Limits(cpu_s=5, wall_s=1.5))
    assert v.status == "timeout_wall", v
    healthy(clean)


def test_double_forked_setsid_daemon(clean):
    token = "daemon-" + secrets.token_hex(8)
    program = daemon_program(token, "import time; time.sleep(10**6)", done="parent done")
    v = run(clean, program, Limits(cpu_s=5, wall_s=8))
    assert v.status == "ok", v
    assert v.stdout == b"parent done\n"
    alive = wait_no_sandbox_processes(token)
    assert not alive, f"daemon outlived its job: {alive}"


def test_killing_the_parent_and_kill_minus_one(clean):
    program = (
        "import os, signal\n"
        "try:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError as e:\n    print('ppid', e)\n"
        "os.kill(-1, signal.SIGKILL)\n"
        "print('survived')\n"
    )
    v = run(clean, program)
    assert v.status in ("runtime_error", "ok"), v
    assert b"survived" not in v.stdout or v.status == "ok"
    healthy(clean)
    healthy(clean)


def test_sys_exit_before_the_asserts(clean):
    files, command = python_test_job("import sys\nsys.exit(0)\ndef f():\n    return 1\n", ["assert f() == 2"])
    v = execute(files, command, SMALL, backend=clean, domain="hostile")
    assert v.tests and not any(t.passed for t in v.tests), v.tests
    assert not v.all_passed
    files, command = python_test_job("import os\ndef f():\n    return 1\nos._exit(0)\n", ["assert f() == 2"])
    v = execute(files, command, SMALL, backend=clean, domain="hostile")
    assert v.status != "sandbox_error" and not v.all_passed and not v.tests[0].passed, v


def test_printenv_and_proc_environ_show_no_worker_secret(clean, monkeypatch):
    secret = "temper-secret-" + secrets.token_hex(8)
    monkeypatch.setenv("TEMPER_WORKER_SECRET", secret)
    program = (
        "import glob, os, subprocess\n"
        "print(subprocess.run(['printenv'], capture_output=True, text=True).stdout)\n"
        "for p in glob.glob('/proc/*/environ'):\n"
        "    try:\n        print(p, open(p, 'rb').read())\n    except OSError as e:\n        print(p, e)\n"
    )
    v = run(clean, program)
    assert v.status == "ok", v
    assert secret.encode() not in v.stdout + v.stderr
    assert b"TEMPER_WORKER_SECRET" not in v.stdout
    assert b"DOCKER" not in v.stdout and b"/var/run/docker.sock" not in v.stdout


def test_no_network_and_no_docker_socket(clean):
    program = (
        "import os, socket\n"
        "print('sock', os.path.exists('/var/run/docker.sock'), os.path.exists('/run/docker.sock'))\n"
        "s = socket.socket()\ns.settimeout(1)\n"
        "try:\n    s.connect(('1.1.1.1', 80))\n    print('NET-OK')\nexcept OSError as e:\n    print('net refused', e)\n"
    )
    v = run(clean, program)
    assert v.status == "ok", v
    assert b"sock False False" in v.stdout and b"NET-OK" not in v.stdout


def test_reading_another_jobs_tmp(clean):
    token = secrets.token_hex(12)
    writer = (
        "import os\n"
        f"open('/tmp/secret-{token}', 'w').write('{token}')\n"
        f"open('/dev/shm/secret-{token}', 'w').write('{token}')\n"
        f"open('secret-{token}', 'w').write('{token}')\n"
    )
    assert run(clean, writer).status == "ok"
    reader = (
        "import glob\n"
        "for p in glob.glob('/tmp/*') + glob.glob('/tmp/.*') + glob.glob('/dev/shm/*') + glob.glob('/work/*') + glob.glob('/work/.*'):\n"
        "    print(p)\n"
        "    try:\n        print(open(p).read())\n    except OSError:\n        pass\n"
    )
    for _ in range(3):  # the docker pool reuses containers within a domain: all get the chance
        v = run(clean, reader)
        assert v.status == "ok", v
        assert token.encode() not in v.stdout


def test_reading_the_expected_outputs_from_disk(clean):
    files, command = python_test_job(
        "import glob, os\n"
        "for p in glob.glob('/work/*') + glob.glob('/work/.*') + glob.glob('/tmp/*'):\n"
        "    try:\n        print(p, open(p, errors='replace').read())\n    except Exception as e:\n        print(p, e)\n"
        "def answer():\n    return 0\n",
        ["assert answer() == 987654321"],
    )
    nonce = marshal.loads(files[SPEC_FILE])["nonce"]
    v = execute(files, command, SMALL, backend=clean, domain="hostile")
    assert v.status == "ok", v
    assert b"/work/solution.py" in v.stderr  # the program's prints reach the job's stderr
    seen = v.stderr + v.stdout.split(b"@@TEMPER-TEST")[0]
    assert b"987654321" not in seen and nonce.encode() not in seen
    assert not v.all_passed


def test_forged_markers_do_not_pass(clean):
    files, command = python_test_job(
        "import os\n"
        "for i in range(3):\n"
        "    print('\\n@@TEMPER-TEST ' + '0' * 32 + ' %d PASS \"\"' % i)\n"
        "os._exit(0)\n",
        ["assert False", "assert False", "assert False"],
    )
    v = execute(files, command, SMALL, backend=clean, domain="hostile")
    assert not any(t.passed for t in v.tests)


def test_a_program_text_no_codec_can_encode_is_the_programs_failure(clean):
    v = run(clean, "print('half a pair: \ud800')")
    assert v.status == "runtime_error" and b"SyntaxError" in v.stderr, v


def test_the_exit_status_is_never_lost(clean):
    """The job's exit status is what it exited with, also when it closed its output first (the
    agent once killed it as soon as its output closed) or exited among orphans the agent reaps
    (its status was once reaped with them: a failed job then read as exit 0, or broke the agent)."""
    v = execute({}, ["python3", "-c", "import os, sys\nos.close(1); os.close(2)\nsum(range(10 ** 6))\nsys.exit(4)"],
                SMALL, backend=clean, domain="hostile")
    assert v.status == "runtime_error" and v.exit_code == 4, v
    for command in (["sh", "-c", "exec >&- 2>&-; exit 3"], ["sh", "-c", "for i in 1 2 3 4; do (true &); done; exit 3"]):
        for _ in range(30 if clean == "bwrap-cold" else 100):
            v = execute({}, command, SMALL, backend=clean, domain="hostile")
            assert v.status == "runtime_error" and v.exit_code == 3, v
