"""Text games (``game-*`` domains): TextWorldExpress's eight games, multi-turn, scored by the game
(:mod:`trainer.environments.textgame`). Levels set the game's own complexity parameters where it
has them (rooms, ingredients, distractors, doors); the seed picks a game of its training fold.
A task's answer is the game's gold command sequence as ``act`` calls, which the ``environment``
stage replays (single-turn rollouts, SFT and the audit).

>>> import random
>>> task = TextGameSource("game-coin", "coin").sample(random.Random(1), 0)
>>> task.meta["environment"], task.prompt.startswith("You are playing a text game")
('textgame', True)
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random

from trainer.catalogue import DomainSpec, register
from trainer.environments import make_environment
from trainer.environments.textgame import gold_path, train_seeds
from trainer.tasks.base import Task

FAMILY = "textgames"
MAX_STEPS = 60
LEVEL_PARAMS: dict[str, list[str]] = {
    "cookingworld": ["numLocations=1,numIngredients=1,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
                     "numLocations=3,numIngredients=2,numDistractorItems=3,includeDoors=0,limitInventorySize=0",
                     "numLocations=6,numIngredients=3,numDistractorItems=5,includeDoors=1,limitInventorySize=0"],
    "coin": ["numLocations=2,numDistractorItems=0,includeDoors=0", "numLocations=5,numDistractorItems=2,includeDoors=1",
             "numLocations=10,numDistractorItems=5,includeDoors=1"],
    "twc": ["numLocations=1,numItemsToPutAway=1,includeDoors=0,limitInventorySize=0",
            "numLocations=2,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0",
            "numLocations=3,numItemsToPutAway=4,includeDoors=1,limitInventorySize=0"],
    "mapreader": ["numLocations=3,maxDistanceApart=2,includeDoors=0,maxDistractorItemsPerLocation=0",
                  "numLocations=8,maxDistanceApart=4,includeDoors=0,maxDistractorItemsPerLocation=2",
                  "numLocations=11,maxDistanceApart=6,includeDoors=0,maxDistractorItemsPerLocation=3"],
    "arithmetic": [""], "sorting": [""], "simonsays": [""], "peckingorder": [""],
}
"""Each game's parameters by level (the games without parameters have one level)."""
TITLES = {"cookingworld": "cook a recipe", "coin": "find the coin", "twc": "put things where they belong (TextWorld Commonsense)",
          "mapreader": "fetch the coin with a map", "arithmetic": "solve a sum, fetch the matching bundle",
          "sorting": "sort objects by quantity", "simonsays": "do what Simon says", "peckingorder": "follow the pecking order"}
VERIFIER_SPEC = {"stages": [{"type": "environment", "params": {"max_steps": MAX_STEPS}, "timeout_s": 30.0}]}


def prompt(description: str, observation: str) -> str:
    return ("You are playing a text game. " + description.strip() + "\n\n" + observation.strip() + "\n\n"
            'Each turn, reply with one command as a JSON tool call: {"tool": "act", "command": "look around"}. '
            "Commands are short: look around, inventory, move north, open fridge, take coin, put coin in box, "
            f"read map, eat meal... The game ends when the task is done or failed; you have {MAX_STEPS} commands.")


@dataclasses.dataclass
class TextGameSource:
    """Task source for one game."""

    slug: str
    game: str

    @property
    def levels(self) -> int:
        return len(LEVEL_PARAMS[self.game])

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        level = max(0, min(int(level), self.levels - 1))
        params = LEVEL_PARAMS[self.game][level]
        while True:  # a game won in one command (the coin in the first room) teaches nothing: the next one
            seed = rng.choice(train_seeds(self.game, params))
            observation, gold, description = gold_path(self.game, params, seed)
            if len(gold) >= 2:
                break
        meta = {"environment": "textgame", "game": self.game, "params": params, "seed": seed, "max_steps": MAX_STEPS}
        answer = "\n".join(json.dumps({"tool": "act", "command": c}) for c in gold)
        return Task(self.slug, f"L{level}-{seed}", prompt(description, observation), answer, level, meta)


def _new_environment(task: Task):
    return make_environment("textgame")


def register_all() -> list[DomainSpec]:
    specs = []
    for game, title in TITLES.items():
        specs.append(register(DomainSpec(
            slug=f"game-{game}", title=f"Text game: {title}", kind="text", family=FAMILY,
            source=TextGameSource(f"game-{game}", game),
            description=(f"TextWorldExpress's {game} game played over many turns with one command a turn; scored by the game "
                         "(pass when it says the task succeeded, partial for the subgoals it credits)."),
            verifier_spec=VERIFIER_SPEC,
            task_source_spec={"family": FAMILY, "game": game, "levels": len(LEVEL_PARAMS[game]), "multi_turn": True,
                              "environment": "textgame", "package": "textworld-express==1.1.0"},
            environment=functools.partial(_new_environment),
        )))
    return specs
