"""Text games (``game-*``): TextWorldExpress's eight games, played through the environment one
command a turn and scored by the game; the gold commands pass, half of them does not; episodes
share a few JVMs (replayed from the seed when their engine served another episode); a command the
game does not know is the turn's observation; the game's levels are its own parameters."""
from __future__ import annotations

import json
import random

import pytest

from trainer.catalogue import all_domains
from trainer.catalogue.textgames import LEVEL_PARAMS
from trainer.environments.textgame import POOL_SIZE, TextGameEnv
from trainer.outcomes import Outcome

DOMAINS = {slug: spec for slug, spec in all_domains().items() if spec.family == "textgames"}


@pytest.fixture(autouse=True)
def java():
    from tests.services import require_java

    require_java()


def test_eight_games_with_their_levels():
    assert sorted(DOMAINS) == sorted(f"game-{g}" for g in LEVEL_PARAMS)
    assert len(DOMAINS) == 8 and DOMAINS["game-cookingworld"].source.levels == 3


@pytest.mark.parametrize("slug", sorted(f"game-{g}" for g in LEVEL_PARAMS))
def test_gold_commands_win_and_half_of_them_do_not(slug):
    from trainer.families.references import wrong_completion

    spec = DOMAINS[slug]
    for level in range(spec.source.levels):
        task = spec.source.sample(random.Random(level), level)
        assert spec.verify(task.answer, task).outcome is Outcome.PASS
        assert spec.verify(wrong_completion(spec, task), task).outcome in (Outcome.FAIL, Outcome.PARTIAL)


def test_interleaved_episodes_share_the_engines_and_keep_their_own_games():
    spec = DOMAINS["game-cookingworld"]
    tasks = [spec.source.sample(random.Random(seed), 1) for seed in range(POOL_SIZE + 3)]
    envs = [TextGameEnv() for _ in tasks]
    for env, task in zip(envs, tasks):
        env.reset(task)
    plans = [task.answer.splitlines() for task in tasks]
    results = [None] * len(tasks)
    for turn in range(max(map(len, plans))):  # one command of every episode per round, as the runner batches them
        for i, (env, plan) in enumerate(zip(envs, plans)):
            if results[i] is None and turn < len(plan):
                step = env.step(plan[turn])
                if step.done:
                    results[i] = step.outcome
    assert [r.outcome for r in results] == [Outcome.PASS] * len(tasks)


def test_unknown_and_empty_commands_are_the_turns_observation():
    spec = DOMAINS["game-coin"]
    task = spec.source.sample(random.Random(0), 1)
    env = TextGameEnv()
    env.reset(task)
    assert "Unknown action" in env.step(json.dumps({"tool": "act", "command": "fly to the moon"})).observation
    assert env.step(json.dumps({"tool": "act", "command": ""})).observation.startswith("error:")
    assert env.step(json.dumps({"tool": "dance"})).observation.startswith("error:")
    assert env.step(json.dumps({"tool": "act", "command": "x" * 100_000})).done is False
    verdict = env.evaluate()
    assert verdict.outcome is Outcome.FAIL and verdict.details["commands"] == 2
