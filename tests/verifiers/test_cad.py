"""3D modelling checked by geometry (``cad-*``): every family's reference script passes in the
real sandbox and a part with a wrong dimension fails; the geometry checks see through solids
that match one measure but not the part (no holes, holes elsewhere, a second solid, an open or
inside-out mesh); what a script does to its own run is its outcome; one script per answer."""
from __future__ import annotations

import base64
import random

import numpy as np
import pytest

from trainer.catalogue import all_domains
from trainer.catalogue.cad import wrong_completion
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.tasks.cad import FAMILIES, LEVELS, cad_task, plate_checks, plate_script
from trainer.verifiers.cad import analyse, inside, parse_mesh

DOMAINS = {slug: spec for slug, spec in all_domains().items() if spec.family == "cad"}


@pytest.fixture
def verify(real_sandbox):
    from tests.services import require_sandbox_libs

    require_sandbox_libs()

    def run(completion: str, task: Task):
        return DOMAINS[task.domain].cascade(real_sandbox)(completion, task)
    return run


def script(code: str) -> str:
    return f"```python\nimport manifold3d as m3d\n{code}\n```"


def test_three_families_over_three_levels_draw_every_kind():
    assert sorted(DOMAINS) == ["cad-fit", "cad-modify", "cad-part"]
    kinds = {family: {cad_task(family, random.Random(s), s % LEVELS).kind for s in range(60)} for family in FAMILIES}
    assert kinds == {"part": {"plate", "tube", "bracket"}, "modify": {"add_hole", "thickness", "widen"}, "fit": {"peg", "sleeve"}}


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_passes_and_a_wrong_dimension_fails_in_the_sandbox(verify, family):
    spec = DOMAINS[f"cad-{family}"]
    for seed in range(6):
        task = spec.source.sample(random.Random(seed), seed % LEVELS)
        good = verify(task.answer, task)
        assert good.outcome is Outcome.PASS, (task.meta["kind"], good.details)
        assert good.details["thumbnail"].startswith("data:image/png;base64,")  # the solid, drawn for the trajectory view
        bad = verify(wrong_completion(task), task)
        assert bad.outcome is Outcome.FAIL and not bad.is_infrastructure, (task.meta["kind"], bad.details)


def test_solids_that_match_one_measure_but_not_the_part_fail(verify):
    p = {"length": 60.0, "width": 40.0, "thick": 5.0, "diameter": 8.0, "holes": [(15.0, 20.0), (45.0, 20.0)]}
    task = Task("cad-part", "t", "...", None, 0, {"checks": plate_checks(p)})
    assert verify(f"```python\n{plate_script(p)}```", task).outcome is Outcome.PASS
    volume = 60 * 40 * 5 - 2 * np.pi * 16 * 5
    wrong = {
        "no holes, same volume": f"result = m3d.Manifold.cube([60, 40, {volume / 2400}])",
        "holes elsewhere": ("result = m3d.Manifold.cube([60, 40, 5]) - m3d.Manifold.cylinder(7, 4, circular_segments=96)"
                            ".translate([15, 10, -1]) - m3d.Manifold.cylinder(7, 4, circular_segments=96).translate([45, 10, -1])"),
        "blind holes": ("result = m3d.Manifold.cube([60, 40, 5]) - m3d.Manifold.cylinder(3, 4, circular_segments=96)"
                        ".translate([15, 20, 2.5]) - m3d.Manifold.cylinder(3, 4, circular_segments=96).translate([45, 20, 2.5])"),
        "two solids": "result = m3d.Manifold.cube([29, 40, 5]) + m3d.Manifold.cube([29, 40, 5]).translate([31, 0, 0])",
        "a cube": "result = m3d.Manifold.cube([1, 1, 1])",
        "nothing": "result = m3d.Manifold()",
        "not a solid": "result = 42",
    }
    for name, code in wrong.items():
        verdict = verify(script(code), task)
        assert verdict.outcome in (Outcome.FAIL, Outcome.RUNTIME_ERROR) and verdict.reward == 0.0, (name, verdict.details)
        assert not verdict.is_infrastructure, (name, verdict.details)


def test_what_a_script_does_to_its_run_is_its_outcome(verify):
    task = DOMAINS["cad-part"].source.sample(random.Random(1), 0)
    outcomes = {
        "raises": script("raise ValueError('no')"),
        "loops": script("while True:\n    pass"),
        "exits early": script("import os\nos._exit(0)"),
        "forges an empty mesh": script("print('@@TEMPER-MESH  ')\nimport os\nos._exit(0)"),
        "prints two meshes": task.answer.replace("```python\n", "```python\nimport sys\nprint('@@TEMPER-MESH AAAA AAAA')\n", 1),
        "two scripts": task.answer + "\n" + task.answer,
    }
    for name, completion in outcomes.items():
        verdict = verify(completion, task)
        assert verdict.outcome is not Outcome.PASS and verdict.reward == 0.0, name
        assert not verdict.is_infrastructure, (name, verdict.details)


def _mesh_line(vertices, triangles) -> bytes:
    v = np.asarray(vertices, "<f8").tobytes()
    t = np.asarray(triangles, "<i4").tobytes()
    return b"@@TEMPER-MESH " + base64.b64encode(v) + b" " + base64.b64encode(t) + b"\n"


def test_mesh_topology_and_ray_parity():
    cube_v = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], float)
    faces = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1], [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4],
             [1, 5, 7], [1, 7, 3]]
    cube_t = np.array(faces)
    g = analyse(cube_v, cube_t)
    assert g.watertight and g.components == 1 and g.genus == 0 and abs(g.volume - 1) < 1e-9
    assert inside(cube_v, cube_t, [[0.5, 0.5, 0.5], [1.5, 0.5, 0.5], [0.5, 0.5, -0.2]]) == [True, False, False]
    assert not analyse(cube_v, cube_t[:-1]).watertight  # an open box
    flipped = cube_t[:, ::-1]
    assert analyse(cube_v, flipped).volume < 0  # inside out: the stage refuses a non-positive volume
    doubled = analyse(np.vstack([cube_v, cube_v + 3]), np.vstack([cube_t, cube_t + 8]))
    assert doubled.components == 2
    mesh = parse_mesh(_mesh_line(cube_v, cube_t))
    assert not isinstance(mesh, str) and mesh[1].shape == (12, 3)
    assert parse_mesh(_mesh_line(cube_v, cube_t) * 2) == "2 meshes written: one solid per answer"
    assert analyse(np.array([[np.nan, 0, 0]] + cube_v.tolist()[1:]), cube_t).problem.startswith("a vertex coordinate is not finite")
    assert analyse(cube_v * 1e200, cube_t).problem.startswith("a vertex coordinate is not finite")
    # a sealed pocket inside a solid is a second shell, even when a zero-thickness fold glues them
    pocket = (cube_v * 0.2 + 0.4, cube_t[:, ::-1] + 8)
    hollow = analyse(np.vstack([cube_v, pocket[0]]), np.vstack([cube_t, pocket[1]]))
    assert hollow.watertight and hollow.components == 2
    fold = np.array([[0, 8, 9], [0, 9, 8]])
    assert not analyse(np.vstack([cube_v, pocket[0]]), np.vstack([cube_t, pocket[1], fold])).watertight
    assert inside(cube_v, cube_t, [[1.0, 0.5, 0.5]]) in ([None], [True], [False])  # on the surface: the rays may disagree
    assert analyse(cube_v, cube_t + 100).problem == "a triangle names a vertex that does not exist"


def test_parts_close_in_measure_but_wrong_in_shape_fail(verify):
    """A square peg of the right area (its corners do not fit the hole), plates whose holes are
    pinholes or the old size after a widening, and a bracket whose leg is half as wide and twice
    as thick: each fails on the rings and grids of points around the features."""
    peg_task = next(t for t in (DOMAINS["cad-fit"].source.sample(random.Random(s), 0) for s in range(20)) if t.meta["kind"] == "peg")
    inside_ring = next(c for c in peg_task.meta["checks"] if c["check"] == "inside")["points"]
    cx = sum(p[0] for p in inside_ring) / len(inside_ring)
    cy = sum(p[1] for p in inside_ring) / len(inside_ring)
    diameter = next(c for c in peg_task.meta["checks"] if c["check"] == "diameter")
    length = next(c for c in peg_task.meta["checks"] if c["check"] == "bbox_max")["expected"][2]
    side = ((diameter["low"] + diameter["high"]) / 2) * (np.pi ** 0.5) / 2  # the square with the circle's area
    square = script(f"result = m3d.Manifold.cube([{side}, {side}, {length}], center=True).translate([{cx}, {cy}, {length / 2}])")
    assert verify(square, peg_task).outcome is Outcome.FAIL
    widen = next(t for t in (DOMAINS["cad-modify"].source.sample(random.Random(s), 1) for s in range(60)) if t.meta["kind"] == "widen")
    given = widen.prompt.split("```python\n", 1)[1].split("```", 1)[0]
    assert verify(f"```python\n{given}```", widen).outcome is Outcome.FAIL
    p = {"length": 60.0, "width": 40.0, "thick": 5.0, "diameter": 8.0, "holes": [(15.0, 20.0)]}
    task = Task("cad-part", "t", "...", None, 0, {"checks": plate_checks(p)})
    pinhole = plate_script({**p, "diameter": 0.4}).replace("cube([60.0, 40.0, 5.0])", f"cube([60.0, 40.0, {5.0 * (2400 - np.pi * 16) / 2400}])")
    assert verify(f"```python\n{pinhole}```", task).outcome is Outcome.FAIL


def test_a_holes_size_is_held_within_five_percent_whatever_the_plates_volume_says(verify):
    """A hole 8% too wide or too narrow is under 1% of a plate's volume: the rings just inside and
    just outside its radius fail it; the right size with 32 facets, or 4% off, passes."""
    p = {"length": 90.0, "width": 64.0, "thick": 12.0, "diameter": 7.0, "holes": [(79.0, 27.0), (18.0, 23.0)]}
    task = Task("cad-part", "t", "...", None, 0, {"checks": plate_checks(p)})

    def holes(diameter: float, segments: int = 96) -> str:
        return "```python\n" + plate_script({**p, "diameter": diameter}).replace("circular_segments=96", f"circular_segments={segments}") + "```"

    assert verify(holes(7.0), task).outcome is Outcome.PASS
    assert verify(holes(7.0, 32), task).outcome is Outcome.PASS
    assert verify(holes(7.0 * 1.04), task).outcome is Outcome.PASS
    for wrong in (7.0 * 1.08, 7.0 * 0.92):
        v = verify(holes(wrong), task)
        assert v.outcome is Outcome.FAIL and ("outside" in v.details["error"] or "inside" in v.details["error"])
    assert verify(holes(7.0, 6), task).outcome is Outcome.FAIL  # a hexagon is not a round hole
