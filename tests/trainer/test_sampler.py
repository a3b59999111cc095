"""Task sampler: domain mix, adaptive budget, curriculum, state round trip."""
from __future__ import annotations

import random
from collections import Counter

from trainer.config import SamplerConfig
from trainer.sampler import TaskSampler, sample_budget
from trainer.catalogue.builtin import ADDITION, PARITY, REVERSAL, verify_exact

SOURCES = {s.slug: s for s in (ADDITION, REVERSAL, PARITY)}


def test_domain_mix_follows_weights():
    sampler = TaskSampler(SOURCES, {"builtin-addition": 3, "builtin-parity": 1}, SamplerConfig(),
                          n=8, seed=0)
    counts = Counter(task.domain for task, _ in sampler.draw(4000))
    assert set(counts) == {"builtin-addition", "builtin-parity"}
    assert 0.72 < counts["builtin-addition"] / 4000 < 0.78


def test_budget_is_largest_where_uncertain():
    assert sample_budget(None, 2, 16) == 16
    assert sample_budget(0.5, 2, 16) == 16
    assert sample_budget(0.0, 2, 16) == sample_budget(1.0, 2, 16) == 2
    assert sample_budget(0.5, 2, 16) > sample_budget(0.8, 2, 16) > sample_budget(0.97, 2, 16)
    cfg = SamplerConfig(adaptive_budget=True, min_samples=2, max_samples=12)
    sampler = TaskSampler({"builtin-addition": ADDITION}, {"builtin-addition": 1}, cfg, n=8, seed=0)
    solved, hopeless, open_ = ADDITION.make(1, 1), ADDITION.make(9, 9), ADDITION.make(4, 5)
    for _ in range(40):
        sampler.update(solved, [True] * 8)
        sampler.update(hopeless, [False] * 8)
        sampler.update(open_, [True, False] * 4)
    assert sampler.budget(solved) == sampler.budget(hopeless) == 2
    assert sampler.budget(open_) == 12
    assert sampler.budget(ADDITION.make(2, 2)) == 12  # never seen: uncertain


def test_curriculum_raises_level_when_pass_rate_passes_threshold():
    cfg = SamplerConfig(curriculum=True, curriculum_threshold=0.8, curriculum_min_samples=16, curriculum_review=0)
    sampler = TaskSampler({"builtin-reversal": REVERSAL}, {"builtin-reversal": 1}, cfg, n=8, seed=0)
    assert sampler.levels["builtin-reversal"] == 0
    task = sampler.draw(1)[0][0]
    assert len(task.answer) == 2
    sampler.update(task, [True] * 8)  # 8 samples: not enough yet
    assert sampler.levels["builtin-reversal"] == 0
    sampler.update(task, [True] * 8)
    assert sampler.levels["builtin-reversal"] == 1
    harder = sampler.draw(1)[0][0]
    assert harder.level == 1 and len(harder.answer) == 3
    sampler.update(harder, [False] * 32)
    assert sampler.levels["builtin-reversal"] == 1


def test_curriculum_reviews_the_levels_passed():
    cfg = SamplerConfig(curriculum=True, curriculum_threshold=0.8, curriculum_min_samples=8, curriculum_review=0.25)
    sampler = TaskSampler({"builtin-parity": PARITY}, {"builtin-parity": 1}, cfg, n=8, seed=0)
    assert {t.level for t, _ in sampler.draw(50)} == {0}  # nothing passed yet: nothing to review
    for level in (0, 1, 2):
        sampler.update(PARITY.sample(random.Random(level), level), [True] * 8)
    assert sampler.levels["builtin-parity"] == 3
    levels = [t.level for t, _ in sampler.draw(2000)]
    assert all(0 <= lv <= 3 for lv in levels)
    review = [lv for lv in levels if lv < 3]
    assert 0.2 < len(review) / len(levels) < 0.3  # the review share, spread over every level passed
    assert {0, 1, 2} <= set(review)


def test_state_round_trip_draws_the_same_tasks():
    cfg = SamplerConfig(adaptive_budget=True)
    a = TaskSampler(SOURCES, {s: 1 for s in SOURCES}, cfg, n=8, seed=5)
    for task, _ in a.draw(20):
        a.update(task, [random.random() < 0.5 for _ in range(8)])
    state = a.state_dict()
    b = TaskSampler(SOURCES, {s: 1 for s in SOURCES}, cfg, n=8, seed=99)
    b.load_state_dict(state)
    assert a.draw(30) == b.draw(30)


def test_builtin_verifiers_are_exact_match():
    rng = random.Random(0)
    for source in SOURCES.values():
        task = source.sample(rng)
        assert verify_exact(task.answer, task).reward == 1.0
        assert verify_exact(f" {task.answer}\n", task).outcome.value == "pass"
        assert verify_exact(task.answer + "x", task).reward == 0.0
    assert PARITY.sample(random.Random(1), level=3).answer in ("0", "1")
    assert len(ADDITION.all_tasks()) == 100


def test_set_weights_changes_the_mix_and_survives_a_checkpoint():
    sampler = TaskSampler(SOURCES, {"builtin-addition": 1, "builtin-parity": 1}, SamplerConfig(),
                          n=8, seed=0)
    sampler.set_weights({"builtin-addition": 1, "builtin-parity": 3})
    counts = Counter(task.domain for task, _ in sampler.draw(4000))
    assert 0.72 < counts["builtin-parity"] / 4000 < 0.78
    other = TaskSampler(SOURCES, {"builtin-addition": 1, "builtin-parity": 1}, SamplerConfig(),
                        n=8, seed=0)
    other.load_state_dict(sampler.state_dict())
    assert other.weights == sampler.weights and other.draw(20) == sampler.draw(20)
