"""Reference solutions for the reasoning-gym generators whose entries carry no answer.

Several generators (``rush_hour``, ``boxnet``, ``graph_color``, ``rubiks_cube``,
``propositional_logic``) accept many answers and leave ``entry["answer"]`` empty; their own
``score_answer`` checks validity. These helpers produce one valid answer, so every domain has a
reference that can be verified as a pass (and used for SFT).

>>> rush_hour_solution("AAoooooooooooooooooooooooooooooooooo")
'A+4'
"""
from __future__ import annotations

import ast
import json
import re
from collections import deque
from typing import Any

SIDE = 6


def rush_hour_solution(board: str) -> str:
    """Shortest move list (single steps merged) that drives car ``A`` to the right edge."""
    cells: dict[str, list[int]] = {}
    walls = set()
    for i, ch in enumerate(board):
        if ch == "x":
            walls.add(i)
        elif ch != "o":
            cells.setdefault(ch, []).append(i)
    labels = sorted(cells)
    horizontal = {k: (cells[k][1] - cells[k][0] == 1) for k in labels}
    length = {k: len(cells[k]) for k in labels}
    start = tuple(cells[k][0] for k in labels)
    a = labels.index("A")

    def occupied(state: tuple[int, ...]) -> set[int]:
        occ = set(walls)
        for k, pos in zip(labels, state):
            step = 1 if horizontal[k] else SIDE
            occ.update(pos + step * j for j in range(length[k]))
        return occ

    def solved(state: tuple[int, ...]) -> bool:
        return (state[a] % SIDE) + length["A"] == SIDE

    parents: dict[tuple[int, ...], tuple[tuple[int, ...], str, int] | None] = {start: None}
    queue = deque([start])
    goal = None
    while queue:
        state = queue.popleft()
        if solved(state):
            goal = state
            break
        occ = occupied(state)
        for i, k in enumerate(labels):
            pos, n = state[i], length[k]
            for direction in (-1, 1):
                if horizontal[k]:
                    row = pos // SIDE
                    nxt = pos + direction
                    cell = nxt if direction < 0 else pos + n
                    if cell // SIDE != row or cell < 0 or cell in occ:
                        continue
                else:
                    nxt = pos + direction * SIDE
                    cell = nxt if direction < 0 else pos + n * SIDE
                    if cell < 0 or cell >= SIDE * SIDE or cell in occ:
                        continue
                new = state[:i] + (nxt,) + state[i + 1 :]
                if new not in parents:
                    parents[new] = (state, k, direction)
                    queue.append(new)
    if goal is None:
        raise ValueError("rush hour board has no solution")
    steps: list[tuple[str, int]] = []
    state = goal
    while parents[state] is not None:
        prev, k, direction = parents[state]
        steps.append((k, direction))
        state = prev
    steps.reverse()
    merged: list[list[Any]] = []
    for k, d in steps:
        if merged and merged[-1][0] == k and (merged[-1][1] > 0) == (d > 0):
            merged[-1][1] += d
        else:
            merged.append([k, d])
    # the board shown to the model (and scored) names pieces by sorted position: A, B, C, ...
    shown = {label: chr(ord("A") + i) for i, label in enumerate(labels)}
    return " ".join(f"{shown[k]}{'+' if d > 0 else '-'}{abs(d)}" for k, d in merged)


def boxnet_solution(initial_state: dict[str, list[str]]) -> str:
    """A plan (JSON list of per-step agent actions) that moves every box onto a target of its colour."""
    squares = {tuple(float(x) for x in key.split("_")): list(items) for key, items in initial_state.items()}
    plan: list[dict[str, str]] = []
    for pos in sorted(squares):
        for box in [i for i in squares[pos] if i.startswith("box_")]:
            target = "target_" + box[4:]
            goals = [p for p, its in squares.items() if target in its]
            if not goals:
                continue
            paths = [_grid_path(pos, g, set(squares)) for g in goals]
            path = min(paths, key=len)
            goal = path[-1]
            for here, there in zip(path, path[1:]):
                plan.append({f"Agent[{here[0]}, {here[1]}]": f"move({box}, square[{there[0]}, {there[1]}])"})
            plan.append({f"Agent[{goal[0]}, {goal[1]}]": f"move({box}, {target})"})
            squares[pos].remove(box)
            squares[goal].remove(target)
    return json.dumps(plan)


def _grid_path(start: tuple[float, float], goal: tuple[float, float], squares: set[tuple[float, float]]) -> list[tuple[float, float]]:
    parents: dict[tuple[float, float], tuple[float, float] | None] = {start: None}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            break
        for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nxt = (here[0] + dr, here[1] + dc)
            if nxt in squares and nxt not in parents:
                parents[nxt] = here
                queue.append(nxt)
    path = [goal]
    while parents[path[-1]] is not None:
        path.append(parents[path[-1]])
    return path[::-1]


def invert_moves(moves: str) -> str:
    """The inverse of a Singmaster move sequence, without combined steps.

    >>> invert_moves("B D U' U' R2")
    "R' R' U U D' B'"
    """
    out: list[str] = []
    for move in reversed(moves.split()):
        base = move.rstrip("'2")
        if move.endswith("2"):
            out += [f"{base}'", f"{base}'"]
        elif move.endswith("'"):
            out.append(base)
        else:
            out.append(f"{base}'")
    return " ".join(out)


def _as_obj(value: Any) -> Any:
    return ast.literal_eval(value) if isinstance(value, str) else value


def reference_candidates(name: str, entry: dict[str, Any]) -> list[str]:
    """Answers to try, best first: the entry's own, else ones computed from its metadata."""
    if entry.get("answer") is not None:
        return [str(entry["answer"])]
    meta = entry.get("metadata", {})
    if name == "rush_hour":
        return [rush_hour_solution(meta["board_config"])]
    if name == "boxnet":
        return [boxnet_solution(_as_obj(meta["initial_state"]))]
    if name == "graph_color":
        return [json.dumps({str(k): v for k, v in _as_obj(meta["possible_answer"]).items()})]
    if name == "rubiks_cube":
        return [invert_moves(str(meta["scramble_moves"])), str(meta.get("example_correct_answer", ""))]
    if name == "propositional_logic":
        premises = [str(p) for p in _as_obj(meta["premises"])]
        pairs = [f"({a} ∧ {b})" for i, a in enumerate(premises) for b in premises[i + 1 :] if a != b]
        return [str(meta["example_answer"]), *pairs, *premises]
    return []
