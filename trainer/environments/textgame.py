"""Text games as long-horizon environments (``game-*``): TextWorldExpress's games, scored by the game.

The games (cooking, coin collector, TextWorld Commonsense, map reader, arithmetic, sorting,
Simon says, pecking order) run in TextWorldExpress's engine, a Java program that ships in the
``textworld-express`` package (Java from Debian: ``default-jre-headless``). The policy plays
with one tool, ``act`` {command} (a game command such as ``open fridge`` or ``move west``); the
game's own observation is the tool output; the episode ends when the game ends (won or lost) or
the step budget runs out. The verdict is the game's score: ``pass`` when the game says the task
succeeded, ``partial`` for a score between 0 and 1 (subgoals the game credits), ``fail`` for
0 or a lost game.

The episode's state is its game (name, parameters, seed) and the commands played so far, held
here. Engines are a small pool per process (one JVM each, started on first use): an engine
that last served this episode steps on; any other replays the episode's commands from the seed
first (the games are deterministic), so any number of episodes share a few JVMs.

>>> from trainer.tasks.base import Task
>>> task = Task("game-coin", "x", "...", meta={"environment": "textgame", "game": "coin", "seed": 5,
...             "params": "numLocations=2,numDistractorItems=0,includeDoors=0"})
>>> env = TextGameEnv(); _ = env.reset(task)
>>> env.step('{"tool": "act", "command": "take coin"}').observation
"Unknown action: I'm not sure what you mean."
>>> _ = env.step('{"tool": "act", "command": "move west"}')
>>> env.step('{"tool": "act", "command": "take coin"}').outcome.outcome.value
'pass'
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

from trainer.environments.base import ActionError, StepResult, ToolEnvironment
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

MAX_COMMAND_CHARS = 200
POOL_SIZE = 2
"""JVMs a process keeps for the games (each about 100 MB)."""
ENGINE_STEP_LIMIT = 1_000
JVM_OPTIONS = ("-Xmx256m -Xss1m -XX:CompressedClassSpaceSize=64m -XX:ReservedCodeCacheSize=48m -XX:MaxMetaspaceSize=128m "
               "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
"""A small JVM: it fits the verifier workers' address-space limit (TEMPER_VERIFIER_MEMORY_MB) and
starts in about 0.3 s."""


class _Engine:
    """One TextWorldExpress engine and the episode whose state it holds."""

    def __init__(self) -> None:
        try:
            from textworld_express import TextWorldExpressEnv  # lazy: its engine is a JVM, started on first use
        except ImportError as exc:
            raise RuntimeError("textworld-express is not installed (requirements/common.txt)") from exc
        logging.getLogger("py4j").setLevel(logging.WARNING)  # its shutdown logs to closed streams at exit
        saved = os.environ.get("JAVA_TOOL_OPTIONS")
        os.environ["JAVA_TOOL_OPTIONS"] = JVM_OPTIONS  # the package starts its JVM without options of ours
        try:
            self.env = TextWorldExpressEnv(envStepLimit=ENGINE_STEP_LIMIT)
        finally:
            if saved is None:
                os.environ.pop("JAVA_TOOL_OPTIONS", None)
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = saved
        self.loaded: tuple[str, str] | None = None
        self.holds: tuple[int, int] | None = None
        """(episode id, commands played) of the state the engine is in."""

    def start(self, game: str, params: str, seed: int) -> tuple[str, dict[str, Any]]:
        self.holds = None
        if self.loaded != (game, params):
            self.env.load(gameName=game, gameParams=params)
            self.loaded = (game, params)
        return self.env.reset(seed=seed, gameFold="train", generateGoldPath=False)

    def step(self, command: str) -> dict[str, Any]:
        _, _, _, infos = self.env.step(command)
        return infos


class _Pool:
    def __init__(self, size: int) -> None:
        self.free: list[_Engine] = []
        self.made = 0
        self.size = size
        self.cond = threading.Condition()

    def take(self, episode: int) -> _Engine:
        with self.cond:
            while not self.free and self.made >= self.size:
                self.cond.wait()
            if not self.free:
                self.made += 1
                try:
                    return _Engine()
                except BaseException:
                    self.made -= 1
                    raise
            mine = [e for e in self.free if e.holds is not None and e.holds[0] == episode]
            engine = mine[0] if mine else self.free[0]
            self.free.remove(engine)
            return engine

    def discard(self, engine: _Engine) -> None:
        """Drop a broken engine (its JVM is closed; the next take may start a new one)."""
        try:
            engine.env.close()
        except Exception:  # noqa: BLE001 - it is being thrown away
            pass
        with self.cond:
            self.made -= 1
            self.cond.notify()

    def give(self, engine: _Engine) -> None:
        with self.cond:
            self.free.append(engine)
            self.cond.notify()


_POOL = _Pool(POOL_SIZE)
_EPISODES = iter(range(1, 1 << 62))
_EPISODES_LOCK = threading.Lock()


@functools.lru_cache(maxsize=64)
def gold_path(game: str, params: str, seed: int) -> tuple[str, list[str], str]:
    """(first observation, the game's gold command sequence, task description) of a game."""
    engine = _POOL.take(0)
    try:
        if engine.loaded != (game, params):
            engine.env.load(gameName=game, gameParams=params)
            engine.loaded = (game, params)
        observation, infos = engine.env.reset(seed=seed, gameFold="train", generateGoldPath=True)
        engine.holds = None
        gold = list(engine.env.getGoldActionSequence())
        if gold and gold[0] == "look around":
            gold = gold[1:]
        return observation, gold, infos["taskDescription"]
    finally:
        _POOL.give(engine)


@functools.lru_cache(maxsize=16)
def train_seeds(game: str, params: str) -> list[int]:
    """The seeds of the game's training fold."""
    engine = _POOL.take(0)
    try:
        if engine.loaded != (game, params):
            engine.env.load(gameName=game, gameParams=params)
            engine.loaded = (game, params)
            engine.holds = None  # the episode it held is gone with the old game
        return list(engine.env.getValidSeedsTrain())
    finally:
        _POOL.give(engine)


class TextGameEnv(ToolEnvironment):
    """One episode of one game: its commands so far and the game's last report."""

    name = "textgame"

    def _start(self, task: Task) -> None:
        meta = task.meta
        self.game, self.params, self.seed = str(meta["game"]), str(meta.get("params", "")), int(meta["seed"])
        self.commands: list[str] = []
        self.infos: dict[str, Any] = {"score": 0.0, "tasksuccess": False, "taskfailure": False}
        with _EPISODES_LOCK:
            self.episode = next(_EPISODES)

    def _tool(self, call: dict[str, Any]) -> str:
        if call["tool"] != "act":
            raise ActionError(f"unknown tool {str(call['tool'])[:40]!r}; play with act {{command}}, e.g. "
                              '{"tool": "act", "command": "look around"}')
        command = call.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ActionError('act needs a command: {"tool": "act", "command": "open fridge"}')
        command = " ".join(command.split())[:MAX_COMMAND_CHARS]
        engine = _POOL.take(self.episode)
        try:
            if engine.holds != (self.episode, len(self.commands)):  # another episode's state: replay this one
                engine.start(self.game, self.params, self.seed)
                for earlier in self.commands:
                    engine.step(earlier)
            infos = engine.step(command)
        except Exception as exc:  # noqa: BLE001 - the engine failed on a command: a new engine, and the turn says so
            _POOL.discard(engine)
            raise ActionError(f"the game could not take that command ({type(exc).__name__})") from None
        self.commands.append(command)
        engine.holds = (self.episode, len(self.commands))
        _POOL.give(engine)
        self.infos = infos
        if infos.get("done") or infos.get("tasksuccess") or infos.get("taskfailure"):
            self.done = True
        return str(infos.get("observation", ""))[:4_000]

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        if self.done and not result.done:  # the game ended on this command
            return StepResult(result.observation, True, self.evaluate())
        return result

    def evaluate(self) -> Verification:
        score = float(self.infos.get("score") or 0.0)
        details = {"score": score, "game": self.game, "commands": len(self.commands),
                   "success": bool(self.infos.get("tasksuccess")), "failure": bool(self.infos.get("taskfailure"))}
        if self.infos.get("tasksuccess"):
            return Verification.passed(**details)
        if self.infos.get("taskfailure") or score <= 0:
            return Verification.failed(**details)
        return Verification(Outcome.PARTIAL, min(score, 0.99), details)
