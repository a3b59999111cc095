"""Multi-step tool-use environments: state across turns, reward from the final state."""
from __future__ import annotations

import json
import random

from trainer.environments import make_environment
from trainer.outcomes import Outcome
from trainer.catalogue import get


def test_calculator_kv_episode_needs_several_turns_and_keeps_state():
    task = get("tool-calculator-kv").source.sample(random.Random(5), 1)
    env = make_environment(task.meta["environment"])
    assert env.reset(task) == task.prompt
    assert "price:" in task.prompt and "=" not in task.prompt.split("Tools")[0]  # values are not in the prompt
    store = task.meta["initial_store"]
    observations = [env.step(json.dumps({"tool": "get", "key": k})) for k in sorted(store)]
    assert all(not o.done for o in observations)
    total = round(sum(store[k] * store["qty:" + k.split(":")[1]] for k in store if k.startswith("price:")), 2)
    obs, done, outcome, _ = env.step(json.dumps({"tool": "set", "key": "total", "value": total}))
    assert (done, outcome) == (False, None) and "ok" in obs
    result = env.step('{"tool": "submit"}')
    assert result.done and result.outcome.outcome is Outcome.PARTIAL  # 'discounted' is still missing
    assert result.outcome.score == 0.5


def test_calculator_rejects_code_and_bad_calls_without_ending_the_episode():
    task = get("tool-calculator-kv").source.sample(random.Random(1), 0)
    env = make_environment("calculator_kv")
    env.reset(task)
    assert env.step('{"tool": "calc", "expression": "__import__(\'os\').getcwd()"}').observation.startswith("error")
    assert env.step("no tool call here").observation.startswith("error")
    assert not env.step('{"tool": "keys"}').done


def test_filesystem_episode_edit_until_check_passes():
    task = get("tool-filesystem").source.sample(random.Random(2), 1)
    env = make_environment("filesystem")
    env.reset(task)
    failing = env.step('{"tool": "check"}').observation.splitlines()
    assert failing and all(line.startswith("FAIL") for line in failing)
    for action in task.answer.splitlines()[1:-1]:
        result = env.step(action)
    assert result.observation == "PASS: all requirements hold"
    assert env.step('{"tool": "submit"}').outcome.outcome is Outcome.PASS


def test_step_budget_ends_the_episode_with_final_state_reward():
    task = get("tool-filesystem").source.sample(random.Random(3), 0)
    env = make_environment("filesystem")
    env.reset(task)
    env.max_steps = 2
    env.step('{"tool": "ls"}')
    result = env.step('{"tool": "ls"}')
    assert result.done and result.outcome.outcome is Outcome.FAIL


def test_calculator_totals_asked_to_the_cent_are_not_a_cent_off():
    """Targets are rounded to 2 decimals; the check takes either rounding of a tie, not a cent off."""
    import json
    import random

    from trainer.catalogue import get

    spec = get("tool-calculator-kv")
    for seed in range(40):
        task = spec.source.sample(random.Random(seed), seed % 2)
        assert spec.verify(task.answer, task).outcome.value == "pass"
        calls = [json.loads(line) for line in task.answer.splitlines()]
        for delta in (0.01, -0.01):
            off = "\n".join(json.dumps({**c, "value": round(c["value"] + delta, 2)}) if c.get("tool") == "set" else json.dumps(c)
                            for c in calls)
            assert spec.verify(off, task).outcome.value != "pass", (task.id, delta)
