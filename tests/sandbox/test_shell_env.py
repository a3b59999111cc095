"""The `shell` environment through the trainer's multi-turn runner, on a real (warm bwrap)
sandbox: each turn is a command, its observation the real output and exit status, masked out of
the loss; `submit` ends the episode with the final tree as the submission; every session is torn
down when its episode ends, cut or not."""
from __future__ import annotations

import json

import contextlib
import functools
import threading

from sandbox_helpers import bwrap_ready, require
from trainer.environments import make_environment
from trainer.environments.shell import ShellEnv
from trainer.episodes import multi_turn
from trainer.outcomes import Outcome
from trainer.rollout.base import Generation
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from workers.sandbox import SandboxError, get_runtime, open_session

DOMAIN = "shell-env-test"
TASK = Task(DOMAIN, "1", "Make greet.py print hello.", meta={
    "environment": "shell", "files": {"greet.py": "print('helo')\n"},
    "setup": "git init -q && git add -A && git commit -qm start",
    "session_limits": {"command_wall_s": 10, "memory_mb": 512, "pids": 64, "tmpfs_mb": 64}})
ACTIONS = [
    '{"tool": "bash", "command": "python3 greet.py; ls nothing"}',
    '{"tool": "bash", "command": "sed -i s/helo/hello/ greet.py && git diff --stat && python3 greet.py"}',
    '{"tool": "submit"}',
]


class CharTokenizer:
    """One token per character, so a span of tokens decodes back to its text exactly."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class ScriptedEngine:
    """Gives every episode the same scripted turns (one per call)."""

    def __init__(self, actions):
        self.actions, self.turn = actions, 0

    def generate(self, contexts, params):
        text = self.actions[min(self.turn, len(self.actions) - 1)]
        self.turn += 1
        return [Generation(token_ids=[ord(c) for c in text], logprobs=[-0.5] * len(text), text=text, finished=True)
                for _ in contexts]


def context():
    return VerifyContext(open_session=functools.partial(open_session, backend="bwrap"))


def spans(traj, tok, mask_value):
    out, current = [], []
    for tok_id, m in zip(traj.response_ids, traj.loss_mask):
        if m == mask_value:
            current.append(tok_id)
        elif current:
            out.append(tok.decode(current))
            current = []
    return out + ([tok.decode(current)] if current else [])


def test_shell_episodes_through_the_multi_turn_runner():
    require(*bwrap_ready())
    tok = CharTokenizer()

    def make(task):
        env = make_environment("shell")
        env.bind(context())
        return env

    trajs = multi_turn(ScriptedEngine(ACTIONS), tok, [(TASK, 2, 0)], None, make, max_turns=10,
                       max_episode_tokens=20_000, max_prompt_tokens=4_000)
    assert len(trajs) == 2
    for traj in trajs:
        assert traj.turns == 3 and traj.verification is None  # the verdict is the domain verifier's
        assert spans(traj, tok, 1) == ACTIONS  # the model's turns, trained on
        observations = spans(traj, tok, 0)  # the environment's, masked out of the loss
        assert observations[0] == ("[stdout]\nhelo\n[stderr]\nls: cannot access 'nothing': No such file or directory\n"
                                   "[exit status 2]")
        assert observations[1] == "[stdout]\n greet.py | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\nhello\n[exit status 0]"
        assert all(lp == 0.0 for lp, m in zip(traj.behaviour_logprobs, traj.loss_mask) if m == 0)
        # the explorer's record: each command beside its output and how it ended
        tools = [x for x in traj.transcript if x["role"] == "tool"]
        assert [(x["command"], x["exit"]) for x in tools] == [(json.loads(a)["command"], e) for a, e in
                                                              zip(ACTIONS, ("exit 2", "exit 0"))]
        assert tools[0]["text"] == observations[0]
        assert traj.completion == ("diff --git a/greet.py b/greet.py\n--- a/greet.py\n+++ b/greet.py\n"
                                   "@@ -1 +1 @@\n-print('helo')\n+print('hello')\n")
    assert get_runtime("bwrap").stats()["held"] == 0  # every session given back


def test_a_cut_episode_still_submits_its_tree_and_gives_its_sandbox_back():
    require(*bwrap_ready())
    tok = CharTokenizer()
    endless = ['{"tool": "bash", "command": "echo more >> notes.txt"}']

    def make(task):
        return ShellEnv(context())

    trajs = multi_turn(ScriptedEngine(endless), tok, [(TASK, 1, 0)], None, make, max_turns=3,
                       max_episode_tokens=20_000, max_prompt_tokens=4_000)
    assert trajs[0].truncated and trajs[0].turns == 3
    assert trajs[0].completion.startswith("diff --git a/notes.txt b/notes.txt\nnew file mode 100644\n")
    assert trajs[0].completion.count("+more") == 3
    assert get_runtime("bwrap").stats()["held"] == 0


def test_budget_end_and_sandbox_failure():
    require(*bwrap_ready())
    task = Task(DOMAIN, "2", "Count.", meta={**TASK.meta, "session_limits": {**TASK.meta["session_limits"],
                                                                          "episode_commands": 1}})
    env = ShellEnv(context())
    env.reset(task)
    result = env.step('{"tool": "bash", "command": "echo one"}')
    assert result.done and result.outcome is None
    assert result.observation == "[stdout]\none\n[exit status 0]\n[session over: the episode's 1 commands are used up]"
    assert env.submission() == "" and env.session is None  # nothing changed; torn down
    assert env.step('{"tool": "bash", "command": "true"}').done
    env.reset(TASK)  # a new episode in the same object: a new session
    assert env.step('{"tool": "python", "code": "1"}').observation.startswith("error: unknown tool 'python'")
    assert env.step('{"tool": "bash", "command": "cat greet.py"}').observation == "[stdout]\nprint('helo')\n[exit status 0]"
    env.close()

    def broken(*args, **kwargs):
        raise SandboxError("engine down")

    env = ShellEnv(VerifyContext(open_session=broken))
    env.reset(TASK)
    result = env.step(ACTIONS[0])
    assert result.done and result.outcome.outcome is Outcome.SANDBOX_ERROR and result.outcome.reward is None


def test_a_batch_larger_than_the_sandbox_quota_does_not_wait_on_itself():
    """The domain's quota is taken per job of a session (setup, each command, the final read),
    not per episode: three episodes under a quota of one all finish."""
    require(*bwrap_ready())
    quota = threading.Semaphore(1)
    entered = []

    @contextlib.contextmanager
    def slot(domain, limits):
        if not quota.acquire(timeout=30):
            raise TimeoutError("no sandbox place came free")
        entered.append((domain, limits.wall_s))
        try:
            yield
        finally:
            quota.release()

    ctx = VerifyContext(open_session=functools.partial(open_session, backend="bwrap"), sandbox_slot=slot)
    trajs = multi_turn(ScriptedEngine(ACTIONS), CharTokenizer(), [(TASK, 3, 0)], None, lambda t: ShellEnv(ctx),
                       max_turns=10, max_episode_tokens=20_000, max_prompt_tokens=4_000)
    assert [t.completion.count("+print('hello')") for t in trajs] == [1, 1, 1]
    assert entered == [(DOMAIN, 10.0)] * (3 * 4)  # setup, two commands, the final read
    assert get_runtime("bwrap").stats()["held"] == 0
