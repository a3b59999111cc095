"""The Berkeley Function Calling Leaderboard's data files (the ``bfcl-eval`` package, installed
without its dependencies): where they are, and the multi-turn entries with their reference calls
and function docs. Read by the ``bfcl-*`` catalogue modules and the multi-turn environment."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

DOC_FILES = {"GorillaFileSystem": "gorilla_file_system.json", "MathAPI": "math_api.json", "MessageAPI": "message_api.json",
             "TwitterAPI": "posting_api.json", "TicketAPI": "ticket_api.json", "TradingBot": "trading_bot.json",
             "TravelAPI": "travel_booking.json", "VehicleControlAPI": "vehicle_control.json"}

def data_dir() -> Path:
    """The ``bfcl_eval/data`` folder of the installed package (ImportError names the fix)."""
    try:
        import bfcl_eval  # lazy: a data package, found when its files are first read (installed with --no-deps)
    except ImportError as exc:
        raise ImportError("bfcl-eval is not installed: pip install --no-deps -r requirements/nodeps.txt") from exc
    return Path(bfcl_eval.__file__).parent / "data"


@functools.cache
def entries(category: str) -> dict[str, tuple[dict[str, Any], list[list[str]]]]:
    folder = data_dir()
    truth = {row["id"]: row["ground_truth"] for row in map(json.loads, (folder / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")
                                                            .read_text().splitlines()) if row}
    entries = [json.loads(line) for line in (folder / f"BFCL_v4_multi_turn_{category}.json").read_text().splitlines() if line.strip()]
    return {e["id"]: (e, truth[e["id"]]) for e in entries}


def entry_of(category: str, bfcl_id: str) -> tuple[dict[str, Any], list[list[str]]]:
    """The BFCL entry and its reference calls per turn."""
    return entries(category)[bfcl_id]


@functools.cache
def _class_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    text = (data_dir() / "multi_turn_func_doc" / DOC_FILES[class_name]).read_text()
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def docs_for(entry: dict[str, Any], *, names: list[str] | None = None, turn: int = 0) -> list[dict[str, Any]]:
    """The function docs offered: of ``names``, or those offered at ``turn`` (not excluded, not
    withheld until later)."""
    excluded = set(entry.get("excluded_function") or [])
    withheld = {f for t, fs in (entry.get("missed_function") or {}).items() if int(t) > turn for f in fs}
    docs = [d for c in entry["involved_classes"] for d in _class_docs(c)]
    if names is not None:
        return [d for d in docs if d["name"] in names]
    return [d for d in docs if d["name"] not in excluded and d["name"] not in withheld]


