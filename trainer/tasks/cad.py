"""3D modelling tasks checked by geometry (the ``cad-*`` domains).

Every task is drawn from a seed: dimensions in millimetres, a part, and the checks its solid
must pass (:mod:`trainer.verifiers.cad`). Three families:

* ``part``: a part from a dimensioned description: a plate with a pattern of through-holes, a
  tube, an L-bracket (level 2: with holes in both legs);
* ``modify``: the script of a given part and a change to make: add a hole, change the
  thickness, widen a hole;
* ``fit``: a part that fits a given one: a peg for a plate's hole with a diametral clearance in
  a range, standing in the hole; or a sleeve over a given block with a clearance and a wall.

The checks never take the part's word for anything: volume (within 1 % for parts with round
holes, whose facets the script chooses), bounding box, one solid, its genus (the through-holes),
and points inside and outside the solid where the features must be. A constant solid cannot
pass: the dimensions, hole counts and positions change with the seed.

>>> import random
>>> spec = cad_task("part", random.Random(4), 1)
>>> spec.kind, sorted(c["check"] for c in spec.checks)[:3]
('plate', ['bbox_max', 'bbox_min', 'components'])
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("part", "modify", "fit")
LEVELS = 3
SEGMENTS = 96
"""Facets per circle in the reference scripts."""
ROUND_REL_TOL = 0.01
"""Volume tolerance of parts with round features (a 32-facet hole is within it)."""
HOLE_FREE, HOLE_SOLID = 0.95, 1.05
"""A hole's size within 5%: rings of points at these fractions of its radius must be free (inside
the hole) and solid (around it). The part's volume alone cannot see a hole's size (a hole 18%
too wide is under 1% of a plate); a 32-facet hole (inscribed radius 0.995) passes."""
API = """Write a Python script that builds the solid with manifold3d and assigns it to `result`.
`import manifold3d as m3d` (numpy is available too). Units are millimetres. Useful calls:
- m3d.Manifold.cube([x, y, z], center=False): a box from the origin (or centred);
- m3d.Manifold.cylinder(height, radius_low, radius_high=-1, circular_segments=0, center=False): a
  cylinder along z from z=0 (use 64 or more segments for round features);
- solid.translate([dx, dy, dz]), solid.rotate([ax, ay, az]) (degrees), a + b (union), a - b
  (difference), a ^ b (intersection).
Reply with the script in one ```python block."""


@dataclass
class CadTask:
    """One generated task: what to ask, the checks, and a reference script."""

    family: str
    kind: str
    statement: str
    checks: list[dict[str, Any]]
    reference: str
    given: str = ""
    """A given part's script (modify and fit tasks)."""
    numbers: dict[str, float] = field(default_factory=dict)


def _mm(x: float) -> float:
    return round(x, 1)


def ring(centre: tuple[float, float], radius: float, levels: list[float], axis: str = "z", n: int = 12) -> list[list[float]]:
    """Points on circles of ``radius`` around an axis through ``centre`` (the other two
    coordinates), at each of ``levels`` along the axis: probes of a hole's or a peg's size all
    the way round."""
    out = []
    for level in levels:
        for k in range(n):
            angle = 2 * math.pi * (k + 0.5) / n
            a, b = centre[0] + radius * math.cos(angle), centre[1] + radius * math.sin(angle)
            out.append([level, a, b] if axis == "x" else [a, b, level])
    return [[round(c, 4) for c in point] for point in out]


def grid(lows: list[float], highs: list[float], n: int = 3) -> list[list[float]]:
    """An n x n x n grid of points in a box (a single point on a flat axis)."""
    axes = [[lo + (hi - lo) * (i + 0.5) / n for i in range(n)] if hi > lo else [lo] for lo, hi in zip(lows, highs)]
    return [[round(x, 4), round(y, 4), round(z, 4)] for x in axes[0] for y in axes[1] for z in axes[2]]


def away(points: list[list[float]], holes: list[tuple[float, float]], radius: float, axis: str = "z") -> list[list[float]]:
    """The points farther than ``radius`` from every hole axis."""
    def off(p, h):
        return math.hypot(p[1] - h[0], p[2] - h[1]) if axis == "x" else math.hypot(p[0] - h[0], p[1] - h[1])
    return [p for p in points if all(off(p, h) > radius for h in holes)]


def _plate(rng: random.Random, holes: int) -> dict[str, Any]:
    length, width, thick = _mm(rng.uniform(40, 120)), _mm(rng.uniform(25, 80)), _mm(rng.uniform(3, 12))
    diameter = _mm(rng.uniform(3, min(12, width / 3)))
    while True:  # holes apart by two diameters and clear of the edges; smaller holes when they do not fit
        margin = diameter * 1.2
        centres: list[tuple[float, float]] = []
        for _ in range(400):
            x, y = _mm(rng.uniform(margin, length - margin)), _mm(rng.uniform(margin, width - margin))
            if all(math.hypot(x - a, y - b) > 2 * diameter for a, b in centres):
                centres.append((x, y))
                if len(centres) == holes:
                    return {"length": length, "width": width, "thick": thick, "diameter": diameter, "holes": centres}
        diameter = _mm(max(diameter * 0.8, 1.0))


def plate_script(p: dict[str, Any]) -> str:
    lines = ["import manifold3d as m3d", "", f"plate = m3d.Manifold.cube([{p['length']}, {p['width']}, {p['thick']}])"]
    for x, y in p["holes"]:
        lines.append(f"plate = plate - m3d.Manifold.cylinder({p['thick'] + 2}, {p['diameter'] / 2}, "
                     f"circular_segments={SEGMENTS}).translate([{x}, {y}, -1])")
    lines.append("result = plate")
    return "\n".join(lines) + "\n"


def plate_checks(p: dict[str, Any]) -> list[dict[str, Any]]:
    r, t = p["diameter"] / 2, p["thick"]
    volume = p["length"] * p["width"] * t - len(p["holes"]) * math.pi * r * r * t
    levels = [0.1 * t, 0.5 * t, 0.9 * t]
    holes_free = [pt for x, y in p["holes"] for pt in ring((x, y), HOLE_FREE * r, levels)] + \
        [[x, y, z] for x, y in p["holes"] for z in (0.05 * t, 0.95 * t)]  # each hole open all through, its full size
    solid = [pt for x, y in p["holes"] for pt in ring((x, y), HOLE_SOLID * r, [0.5 * t])]  # and no bigger
    solid += away(grid([0.5, 0.5, 0.2 * t], [p["length"] - 0.5, p["width"] - 0.5, 0.8 * t], 4), p["holes"], 1.5 * r)
    return [
        {"check": "components", "expected": 1},
        {"check": "genus", "expected": len(p["holes"])},
        {"check": "bbox_min", "expected": [0.0, 0.0, 0.0], "abs_tol": 0.05},
        {"check": "bbox_max", "expected": [p["length"], p["width"], p["thick"]], "abs_tol": 0.05},
        {"check": "volume", "expected": round(volume, 3), "rel_tol": ROUND_REL_TOL if p["holes"] else 0.001},
        {"check": "outside", "points": holes_free},
        {"check": "inside", "points": solid},
    ]


def _holes_text(p: dict[str, Any]) -> str:
    if not p["holes"]:
        return "no holes"
    where = "; ".join(f"({x}, {y})" for x, y in p["holes"])
    return f"{len(p['holes'])} through-hole{'s' if len(p['holes']) > 1 else ''} of diameter {p['diameter']} centred at (x, y) = {where}"


def _part(rng: random.Random, level: int) -> CadTask:
    kind = rng.choice(["plate", "tube"] if level == 0 else ["plate", "bracket"] if level == 1 else ["bracket", "plate"])
    if kind == "tube":
        outer, height = _mm(rng.uniform(8, 30)), _mm(rng.uniform(10, 60))
        inner = _mm(rng.uniform(outer * 0.3, outer * 0.8))
        volume = math.pi * (outer ** 2 - inner ** 2) * height
        statement = (f"Model a tube: outer radius {outer}, inner radius {inner}, height {height}, its axis the z axis, "
                     "standing on the plane z = 0.")
        checks = [{"check": "components", "expected": 1}, {"check": "genus", "expected": 1},
                  {"check": "bbox_min", "expected": [-outer, -outer, 0.0], "abs_tol": 0.02 * outer + 0.05},
                  {"check": "bbox_max", "expected": [outer, outer, height], "abs_tol": 0.02 * outer + 0.05},
                  {"check": "volume", "expected": round(volume, 3), "rel_tol": ROUND_REL_TOL},
                  {"check": "outside", "points": ring((0.0, 0.0), 0.85 * inner, [0.1 * height, 0.5 * height, 0.9 * height])
                   + ring((0.0, 0.0), 1.03 * outer, [0.5 * height], n=16)},
                  {"check": "inside", "points": ring((0.0, 0.0), (outer + inner) / 2, [0.1 * height, 0.5 * height, 0.9 * height])}]
        reference = ("import manifold3d as m3d\n\n"
                     f"outer = m3d.Manifold.cylinder({height}, {outer}, circular_segments={SEGMENTS})\n"
                     f"inner = m3d.Manifold.cylinder({height + 2}, {inner}, circular_segments={SEGMENTS}).translate([0, 0, -1])\n"
                     "result = outer - inner\n")
        return CadTask("part", kind, statement, checks, reference)
    if kind == "plate":
        p = _plate(rng, rng.randint(1, 2) if level == 0 else rng.randint(2, 4))
        statement = (f"Model a rectangular plate {p['length']} long (x), {p['width']} wide (y) and {p['thick']} thick (z), "
                     f"from the origin into positive x, y and z, with {_holes_text(p)}, each through the whole plate.")
        return CadTask("part", kind, statement, plate_checks(p), plate_script(p), numbers=p)
    # an L-bracket: a base plate and an upright leg at x = 0, holes at level 2
    length, width, thick = _mm(rng.uniform(40, 90)), _mm(rng.uniform(20, 50)), _mm(rng.uniform(3, 8))
    height = _mm(rng.uniform(30, 70))
    diameter = _mm(rng.uniform(3, min(8, width / 3))) if level == 2 else 0.0
    base_hole = (_mm(rng.uniform(thick + diameter * 1.5, length - diameter * 1.5)), _mm(width / 2)) if diameter else None
    leg_hole = (_mm(width / 2), _mm(rng.uniform(thick + diameter * 1.5, height - diameter * 1.5))) if diameter else None
    r = diameter / 2
    volume = length * width * thick + thick * width * (height - thick) - (2 * math.pi * r * r * thick if diameter else 0.0)
    holes = (f" The base has a through-hole of diameter {diameter} centred at (x, y) = ({base_hole[0]}, {base_hole[1]}); the "
             f"leg has one of the same diameter, along x, centred at (y, z) = ({leg_hole[0]}, {leg_hole[1]}).") if diameter else ""
    statement = (f"Model an L-bracket: a base plate {length} long (x), {width} wide (y), {thick} thick (z) from the origin, "
                 f"and an upright leg {thick} thick in x, standing on the base at x = 0 to x = {thick}, the full width of the "
                 f"base, reaching z = {height}.{holes}")
    checks = [{"check": "components", "expected": 1}, {"check": "genus", "expected": 2 if diameter else 0},
              {"check": "bbox_min", "expected": [0.0, 0.0, 0.0], "abs_tol": 0.05},
              {"check": "bbox_max", "expected": [length, width, height], "abs_tol": 0.05},
              {"check": "volume", "expected": round(volume, 3), "rel_tol": ROUND_REL_TOL if diameter else 0.001},
              {"check": "inside", "points": grid([thick + 0.5, 0.5, 0.2 * thick], [length - 0.5, width - 0.5, 0.8 * thick])
               + grid([0.2 * thick, 0.5, thick + 0.5], [0.8 * thick, width - 0.5, height - 0.5])},
              {"check": "outside", "points": grid([thick + 0.3, 0.5, thick + 0.3], [length - 0.5, width - 0.5, height - 0.5])}]
    lines = ["import manifold3d as m3d", "", f"base = m3d.Manifold.cube([{length}, {width}, {thick}])",
             f"leg = m3d.Manifold.cube([{thick}, {width}, {height}])", "bracket = base + leg"]
    if diameter:
        levels = [0.1 * thick, 0.5 * thick, 0.9 * thick]
        checks[-1]["points"] += ring(base_hole, HOLE_FREE * r, levels) + ring(leg_hole, HOLE_FREE * r, levels, axis="x")
        checks[-2]["points"] = (away(checks[-2]["points"][:27], [base_hole], 1.5 * r)
                                + away(checks[-2]["points"][27:], [leg_hole], 1.5 * r, axis="x")
                                + ring(base_hole, HOLE_SOLID * r, [thick / 2]) + ring(leg_hole, HOLE_SOLID * r, [thick / 2], axis="x"))
        lines += [f"bracket = bracket - m3d.Manifold.cylinder({thick + 2}, {r}, circular_segments={SEGMENTS})"
                  f".translate([{base_hole[0]}, {base_hole[1]}, -1])",
                  f"bracket = bracket - m3d.Manifold.cylinder({thick + 2}, {r}, circular_segments={SEGMENTS})"
                  f".rotate([0, 90, 0]).translate([-1, {leg_hole[0]}, {leg_hole[1]}])"]
    lines.append("result = bracket")
    return CadTask("part", "bracket", statement, checks, "\n".join(lines) + "\n")


def _modify(rng: random.Random, level: int) -> CadTask:
    p = _plate(rng, rng.randint(1, 2 + level))
    given = plate_script(p)
    change = rng.choice(["add_hole", "thickness", "widen"] if level else ["add_hole", "thickness"])
    q = {**p, "holes": list(p["holes"])}
    if change == "add_hole":
        margin = p["diameter"] * 1.2
        spots = [(_mm(rng.uniform(margin, p["length"] - margin)), _mm(rng.uniform(margin, p["width"] - margin))) for _ in range(400)]
        free = [(x, y) for x, y in spots if all(math.hypot(x - a, y - b) > 2 * p["diameter"] for a, b in p["holes"])]
        if not free:  # no room left: thicken instead
            return _modify_thickness(p, given, rng)
        x, y = free[0]
        q["holes"].append((x, y))
        ask = f"add one more through-hole of the same diameter centred at (x, y) = ({x}, {y})"
    elif change == "thickness":
        return _modify_thickness(p, given, rng)
    else:
        q["diameter"] = _mm(p["diameter"] * rng.uniform(1.25, 1.5))
        ask = f"widen every hole to a diameter of {q['diameter']}, keeping their centres"
    statement = f"Here is the script of a plate with holes:\n```python\n{given}```\nChange it: {ask}. Keep everything else as it is."
    return CadTask("modify", change, statement, plate_checks(q), plate_script(q), given=given, numbers=q)


def _modify_thickness(p: dict[str, Any], given: str, rng: random.Random) -> CadTask:
    q = {**p, "holes": list(p["holes"])}
    q["thick"] = _mm(p["thick"] + rng.choice([-1, 1]) * rng.uniform(1, 3)) if p["thick"] > 4.5 else _mm(p["thick"] + rng.uniform(1, 4))
    ask = f"make the plate {q['thick']} thick instead of {p['thick']}, every hole still going through it"
    statement = f"Here is the script of a plate with holes:\n```python\n{given}```\nChange it: {ask}. Keep everything else as it is."
    return CadTask("modify", "thickness", statement, plate_checks(q), plate_script(q), given=given, numbers=q)


def _fit(rng: random.Random, level: int) -> CadTask:
    kind = rng.choice(["peg", "sleeve"]) if level else "peg"
    if kind == "peg":
        p = _plate(rng, 1)
        (hx, hy), hole = p["holes"][0], p["diameter"]
        low, high = _mm(rng.uniform(0.1, 0.3)), 0.0
        high = _mm(low + rng.uniform(0.2, 0.4))
        length = _mm(p["thick"] + rng.uniform(5, 20))
        statement = (f"Here is the script of a plate with a hole:\n```python\n{plate_script(p)}```\n"
                     f"Model only a cylindrical peg (not the plate) that goes into this hole with a diametral clearance of "
                     f"at least {low} and at most {high} (the peg's diameter is the hole's minus the clearance), {length} long, "
                     f"its axis along z through the hole's centre, standing in the hole from z = 0 up.")
        peg = hole - (low + high) / 2
        checks = [{"check": "components", "expected": 1}, {"check": "genus", "expected": 0},
                  {"check": "bbox_min", "expected": [hx, hy, 0.0], "axes": "z", "abs_tol": 0.05},
                  {"check": "bbox_max", "expected": [hx, hy, length], "axes": "z", "abs_tol": 0.05},
                  {"check": "centroid", "expected": [hx, hy, length / 2], "abs_tol": 0.05},
                  {"check": "diameter", "low": round(hole - high, 4), "high": round(hole - low, 4)},
                  {"check": "inside", "points": ring((hx, hy), (hole - high) / 2 - 0.05, [0.1 * length, 0.5 * length, 0.9 * length], n=16)},
                  {"check": "outside", "points": ring((hx, hy), (hole - low) / 2 + 0.02, [0.1 * length, 0.5 * length, 0.9 * length], n=32)}]
        reference = ("import manifold3d as m3d\n\n"
                     f"result = m3d.Manifold.cylinder({length}, {round(peg / 2, 4)}, circular_segments={SEGMENTS * 2})"
                     f".translate([{hx}, {hy}, 0])\n")
        return CadTask("fit", kind, statement, checks, reference, given=plate_script(p))
    bx, by, bz = _mm(rng.uniform(20, 60)), _mm(rng.uniform(20, 60)), _mm(rng.uniform(15, 40))
    clearance, wall = _mm(rng.uniform(0.2, 0.8)), _mm(rng.uniform(1.5, 4))
    given = f"import manifold3d as m3d\n\nresult = m3d.Manifold.cube([{bx}, {by}, {bz}])\n"
    ox, oy = bx + 2 * (clearance + wall), by + 2 * (clearance + wall)
    oz = bz + clearance + wall
    volume = ox * oy * oz - (bx + 2 * clearance) * (by + 2 * clearance) * (bz + clearance)
    o = -(clearance + wall)
    statement = (f"Here is the script of a block:\n```python\n{given}```\nModel only a cover that slides down over this block: "
                 f"a box open at the bottom, with a clearance of {clearance} between the block and the cover on the four "
                 f"sides and above the block's top, walls and top {wall} thick, the open bottom at z = 0 (flush with the "
                 "block's bottom).")
    checks = [{"check": "components", "expected": 1}, {"check": "genus", "expected": 0},
              {"check": "bbox_min", "expected": [o, o, 0.0], "abs_tol": 0.05},
              {"check": "bbox_max", "expected": [bx - o, by - o, oz], "abs_tol": 0.05},
              {"check": "volume", "expected": round(volume, 3), "rel_tol": 0.001},
              {"check": "outside", "points": grid([-clearance / 2, -clearance / 2, 0.1], [bx + clearance / 2, by + clearance / 2,
                                                                                        bz + clearance / 2], 5)},
              {"check": "inside", "points": grid([o + wall / 2, o + 0.5, 0.5], [o + wall / 2, by - o - 0.5, oz - 0.5])
               + grid([bx - o - wall / 2, o + 0.5, 0.5], [bx - o - wall / 2, by - o - 0.5, oz - 0.5])
               + grid([o + 0.5, o + wall / 2, 0.5], [bx - o - 0.5, o + wall / 2, oz - 0.5])
               + grid([o + 0.5, by - o - wall / 2, 0.5], [bx - o - 0.5, by - o - wall / 2, oz - 0.5])
               + grid([o + 0.5, o + 0.5, oz - wall / 2], [bx - o - 0.5, by - o - 0.5, oz - wall / 2])}]
    reference = ("import manifold3d as m3d\n\n"
                 f"outer = m3d.Manifold.cube([{round(ox, 4)}, {round(oy, 4)}, {round(oz, 4)}]).translate([{o}, {o}, 0])\n"
                 f"cavity = m3d.Manifold.cube([{round(bx + 2 * clearance, 4)}, {round(by + 2 * clearance, 4)}, "
                 f"{round(bz + clearance + 1, 4)}]).translate([{-clearance}, {-clearance}, -1])\n"
                 "result = outer - cavity\n")
    return CadTask("fit", kind, statement, checks, reference, given=given)


def cad_task(family: str, rng: random.Random, level: int) -> CadTask:
    """A task of ``family`` at ``level`` drawn with ``rng``."""
    if family not in FAMILIES:
        raise ValueError(f"unknown CAD family {family!r}; known: {', '.join(FAMILIES)}")
    return {"part": _part, "modify": _modify, "fit": _fit}[family](rng, max(0, min(int(level), LEVELS - 1)))


def prompt(task: CadTask) -> str:
    return f"{task.statement}\n\n{API}"
