"""Multi-step tool-use domains on the environments in :mod:`trainer.environments`.

``tool-calculator-kv``: item prices and quantities are hidden in a key-value store; the model
must ``get`` them, ``calc`` and ``set`` the totals, then ``submit``. ``tool-filesystem``: config
files must be edited until ``check`` passes. Rewards come from the final state; a task's answer
is a reference transcript (one tool call per line) that the ``environment`` stage replays.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import SeededSource, define_domain
from trainer.environments import make_environment
from trainer.tasks.base import Task

FAMILY = "tool_use"
ITEMS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "melon", "grape", "mango"]
KV_TOOLS = ('Tools (reply with exactly one JSON object per turn): {"tool": "get", "key": K}, {"tool": "keys"}, '
            '{"tool": "calc", "expression": "arithmetic"}, {"tool": "set", "key": K, "value": number}, {"tool": "submit"}.')
FS_TOOLS = ('Tools (reply with exactly one JSON object per turn): {"tool": "ls"}, {"tool": "cat", "path": P}, '
            '{"tool": "write", "path": P, "content": TEXT}, {"tool": "replace", "path": P, "old": TEXT, "new": TEXT}, '
            '{"tool": "check"}, {"tool": "submit"}.')


def _call(**kwargs: Any) -> str:
    return json.dumps(kwargs)


def calculator_kv_task(rng: random.Random, level: int) -> tuple[str, list[str], dict[str, Any]]:
    items = rng.sample(ITEMS, 3 + level)
    store: dict[str, Any] = {}
    for item in items:
        store[f"price:{item}"] = round(rng.uniform(0.5, 20), 2)
        store[f"qty:{item}"] = rng.randint(1, 12)
    exact_total = sum(store[f"price:{i}"] * store[f"qty:{i}"] for i in items)
    total = round(exact_total, 2)
    targets: dict[str, float] = {"total": total}
    exact: dict[str, float] = {"total": exact_total}
    goal = "store the total cost (the sum of price times quantity over all items, rounded to 2 decimals) under the key 'total'"
    if level >= 1:
        store["discount"] = rng.choice([0.05, 0.1, 0.15, 0.2])
        exact["discounted"] = total * (1 - store["discount"])
        targets["discounted"] = round(exact["discounted"], 2)
        goal += ", and the total after applying the discount stored under 'discount' (a fraction) under 'discounted'"
    prompt = (f"A key-value store holds prices under price:<item> and quantities under qty:<item> for these items: "
              f"{', '.join(items)}. Using the tools, {goal}. Then submit.\n{KV_TOOLS}")
    actions = [_call(tool="get", key=k) for k in sorted(store)]
    expr = " + ".join(f"{store[f'price:{i}']} * {store[f'qty:{i}']}" for i in items)
    actions += [_call(tool="calc", expression=expr), _call(tool="set", key="total", value=total)]
    if "discounted" in targets:
        actions += [_call(tool="calc", expression=f"{total} * (1 - {store['discount']})"),
                    _call(tool="set", key="discounted", value=targets["discounted"])]
    actions.append(_call(tool="submit"))
    return prompt, actions, {"environment": "calculator_kv", "initial_store": store, "targets": targets,
                             "exact_targets": exact, "max_steps": 40}


SETTINGS = {
    "port": ["80", "8080", "8443", "9000"],
    "debug": ["true", "false"],
    "workers": ["1", "2", "4", "8"],
    "log_level": ["info", "warning", "error"],
    "timeout_s": ["5", "30", "60"],
    "user": ["admin", "svc", "app"],
}


def filesystem_task(rng: random.Random, level: int) -> tuple[str, list[str], dict[str, Any]]:
    paths = rng.sample(["app/config.ini", "db/settings.conf", "worker/env.cfg", "web/server.ini"], 2 + level)
    files, requirements, actions = {}, [], [_call(tool="check")]
    for path in paths:
        keys = rng.sample(sorted(SETTINGS), 3)
        values = {k: rng.choice(SETTINGS[k]) for k in keys}
        files[path] = "".join(f"{k} = {v}\n" for k, v in values.items())
        for k in rng.sample(keys, 1 + level):
            wanted = rng.choice([v for v in SETTINGS[k] if v != values[k]])
            requirements.append([path, k, wanted])
            actions.append(_call(tool="replace", path=path, old=f"{k} = {values[k]}", new=f"{k} = {wanted}"))
    actions += [_call(tool="check"), _call(tool="submit")]
    prompt = ("The files below belong to a service whose configuration check fails. Inspect the files, edit them "
              "until {\"tool\": \"check\"} reports PASS, then submit.\nFiles: " + ", ".join(sorted(files)) + "\n" + FS_TOOLS)
    return prompt, actions, {"environment": "filesystem", "files": files, "requirements": requirements, "max_steps": 40}


GENERATORS = {"calculator-kv": calculator_kv_task, "filesystem": filesystem_task}
TITLES = {"calculator-kv": "Calculator and key-value store", "filesystem": "Edit files until the check passes"}


@dataclasses.dataclass
class ToolUseSource(SeededSource):
    """Task source for one tool-use environment (``slug``: ``tool-<name>``)."""

    name: str
    """Key of ``GENERATORS``."""
    levels: int = 2
    """Level 1 adds items / files and a second target."""

    def generate(self, seed: int, level: int) -> tuple[str, str, dict[str, Any]]:
        """The environment's prompt, the reference transcript (one call a line) and the environment's state."""
        prompt, actions, meta = GENERATORS[self.name](random.Random(seed), level)
        return prompt, "\n".join(actions), meta


def _new_environment(env_name: str, task: Task):
    """One environment per episode: the trainer alternates model turns with its observations."""
    return make_environment(env_name)


def register_all() -> list[DomainSpec]:
    specs = []
    for name, title in TITLES.items():
        vspec = {"stages": [{"type": "environment", "params": {"max_steps": 40}, "timeout_s": 10.0}]}
        specs.append(define_domain(
            ToolUseSource(f"tool-{name}", name), vspec,
            title=f"Tool use: {title}",
            kind="tool_use",
            family=FAMILY,
            description=f"Multi-turn tool use ({title.lower()}); reward from the final state.",
            task_source_spec={"family": FAMILY, "environment": name.replace("-", "_"), "levels": 2, "multi_turn": True},
            environment=functools.partial(_new_environment, name.replace("-", "_")),
        ))
    return specs
