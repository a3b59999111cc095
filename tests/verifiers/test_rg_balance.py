"""The shipped answer shares of the label-balanced reasoning-gym generators are the measurement's,
current, and read instead of measured; a stale entry is measured as before."""
from __future__ import annotations

import random
import warnings

import pytest

from trainer.catalogue import rg_balance
from trainer.catalogue.rg_balance import BALANCED, HEAD, answer_shares, draw_labels, fingerprint, head_digest, measure_shares, shipped
from trainer.tasks.reasoning_gym import level_count

warnings.simplefilter("ignore")

TOP_LEVEL = 3


@pytest.fixture
def fresh_shares():
    answer_shares.cache_clear()
    yield
    answer_shares.cache_clear()


def test_every_level_of_every_balanced_generator_is_shipped_and_current():
    table = shipped()
    stale = [f"{name} level {level}" for name in sorted(BALANCED) for level in range(level_count(name))
             if table.get(name, {}).get(str(level), {}).get("fingerprint") != fingerprint(name, level)]
    assert not stale, f"run python -m trainer.catalogue.rg_balance: missing or stale entries {stale}"
    assert set(table) == set(BALANCED), "the table holds generators that are not balanced"
    extra = [f"{name} level {level}" for name, levels in table.items() for level in levels if int(level) >= level_count(name)]
    assert not extra, f"the table holds levels the generators no longer have: {extra}"


@pytest.mark.parametrize("name", sorted(BALANCED))
def test_the_table_holds_what_the_generator_draws(name):
    """The first draws' labels, recomputed, are those the shipped entry was measured from."""
    for level in sorted({0, min(level_count(name) - 1, TOP_LEVEL)}):
        assert head_digest(draw_labels(name, level, HEAD)) == shipped()[name][str(level)]["head"], (name, level)


@pytest.mark.parametrize("name", ["acre", "gcd"])
def test_a_whole_entry_measured_again_is_the_shipped_one(name):
    """acre's cap is its rarest share, gcd's the floor of BALANCE_MIN_SHARE: both branches."""
    entry = shipped()[name]["0"]
    assert measure_shares(name, 0) == entry
    assert entry["above"] and all(share > entry["cap"] for share in entry["above"].values())


def test_what_the_shares_depend_on_is_in_the_fingerprint(monkeypatch):
    before = fingerprint("gcd", 0)
    assert fingerprint("gcd", 1) != before
    monkeypatch.setattr(rg_balance, "BALANCE_MIN_SHARE", 0.02)
    assert fingerprint("gcd", 0) != before
    monkeypatch.undo()
    monkeypatch.setattr(rg_balance, "code_digest", lambda: "other code")
    assert fingerprint("gcd", 0) != before


def test_an_unreadable_table_is_measured_not_a_crash(monkeypatch, tmp_path, fresh_shares):
    broken = tmp_path / "rg_balance.json"
    broken.write_text('{"acre": {"0": {"fingerpr')
    monkeypatch.setattr(rg_balance, "TABLE", broken)
    shipped.cache_clear()
    try:
        assert shipped() == {}
        entry = measure_shares("acre", 0)
        assert answer_shares("acre", 0) == (entry["above"], entry["cap"])
    finally:
        shipped.cache_clear()


def test_a_current_entry_is_read_not_measured(monkeypatch, fresh_shares):
    def refuse(name, level):
        raise AssertionError(f"measured {name} level {level}")

    monkeypatch.setattr(rg_balance, "measure_shares", refuse)
    above, cap = answer_shares("puzzle24", 0)
    assert above == shipped()["puzzle24"]["0"]["above"] and cap == shipped()["puzzle24"]["0"]["cap"]


def test_a_stale_entry_is_measured_and_samples_the_same_tasks(monkeypatch, fresh_shares):
    from trainer.catalogue import get

    source = get("rg-acre").source
    read = [source.sample(random.Random(seed), 0).id for seed in range(12)]
    stale = {"acre": {"0": {**shipped()["acre"]["0"], "fingerprint": "stale", "above": {}, "cap": 1.0}}}
    monkeypatch.setattr(rg_balance, "shipped", lambda: stale)
    answer_shares.cache_clear()
    measured = []
    monkeypatch.setattr(rg_balance, "measure_shares", lambda name, level: measured.append((name, level)) or measure_shares(name, level))
    assert [source.sample(random.Random(seed), 0).id for seed in range(12)] == read
    assert measured == [("acre", 0)]


def test_the_check_command_lists_stale_entries(monkeypatch, capsys):
    assert rg_balance.main(["--check", "--names", "acre"]) == 0
    monkeypatch.setattr(rg_balance, "fingerprint", lambda name, level: "changed")
    assert rg_balance.main(["--check", "--names", "acre"]) == 1
    assert "acre level 0: missing or stale" in capsys.readouterr().out


def test_the_command_refuses_a_generator_that_is_not_balanced(capsys):
    with pytest.raises(SystemExit) as exit_:
        rg_balance.main(["--check", "--names", "acre", "nosuch"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--names: nosuch not label-balanced" in err and "puzzle24" in err
