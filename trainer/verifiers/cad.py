"""Stage ``cad_mesh``: a modelling script run in the sandbox, its solid checked by geometry.

The completion is a Python script (one fenced block) that builds a solid with manifold3d
(the sandbox's packages: :data:`SANDBOX_LIB`) and assigns it to ``result``. The job runs it and
writes the solid's triangle mesh to stdout as one marker line (vertex coordinates and triangle
indices, base64). Whatever the script does, the verdict comes from that mesh alone, checked here
by trusted code (:func:`analyse`, numpy): one marker line (two meshes is no answer), finite
coordinates, every edge of the triangles shared by exactly two of them in opposite directions
(watertight, manifold, consistently oriented), no triangle without area and no two on the same
three vertices (a zero-thickness fold), then the task's checks, each within its tolerance:
volume, surface area, bounding box, the number of closed shells (joined across edges: one for
every part here, so sealed pockets or shells glued by folds fail), genus (through-holes), the
volume centroid, and points that must lie inside or outside the solid (rings of points in and
around each hole, across a wall, through a cavity; a ray-parity test along three directions
that must agree). A script that forges a mesh has made that mesh: it is judged
as one. Pass only when every check holds (no partial credit: the prompt gives most dimensions).
A solid that reached the checks is handed back as an artifact, ``solid.stl`` (:func:`stl`).

>>> import numpy as np
>>> v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
>>> t = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
>>> g = analyse(v, t)
>>> round(g.volume, 4), g.watertight, g.genus, g.components
(0.1667, True, 0, 1)
>>> inside(v, t, [[0.1, 0.1, 0.1], [0.9, 0.9, 0.9]])
[True, False]
"""
from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers import artifacts
from trainer.verifiers.artifacts import Artifact
from trainer.verifiers.code import STATUS_OUTCOMES, SandboxRun, extract_code, fenced_blocks, sandbox_stage

SANDBOX_LIB = "/usr/local/lib/temper-sandbox"
"""Where the sandbox's importable packages live (installed there by the sandbox's setup)."""
MODEL_FILE = "model.py"
MAX_TRIANGLES = 400_000
MARKER = b"@@TEMPER-MESH "
DEFAULT_LIMITS = {"cpu_s": 20.0, "wall_s": 40.0, "memory_mb": 1024, "output_bytes": 32 << 20}
RUNNER = f'''
import base64, sys
sys.path.insert(0, {SANDBOX_LIB!r})
namespace = {{"__name__": "__main__"}}
with open({MODEL_FILE!r}, encoding="utf-8") as f:
    source = f.read()
exec(compile(source, {MODEL_FILE!r}, "exec"), namespace)
import manifold3d, numpy
result = namespace.get("result")
if not isinstance(result, manifold3d.Manifold):
    sys.stderr.write("the script must assign a manifold3d.Manifold to result, got %s\\n" % type(result).__name__)
    sys.exit(4)
mesh = result.to_mesh()
vertices = numpy.ascontiguousarray(mesh.vert_properties[:, :3], dtype="<f8")
triangles = numpy.ascontiguousarray(mesh.tri_verts, dtype="<i4")
sys.stdout.flush()
sys.stdout.write("@@TEMPER-MESH %s %s\\n" % (base64.b64encode(vertices.tobytes()).decode(), base64.b64encode(triangles.tobytes()).decode()))
'''
"""The job's command (it runs the script, then writes the mesh of ``result``)."""
NO_RESULT_EXIT = 4


@dataclass
class Geometry:
    """What the verifier reads off a mesh."""

    triangles: int
    watertight: bool
    """Every edge in exactly two triangles, in opposite directions."""
    volume: float = 0.0
    area: float = 0.0
    bbox_min: list[float] = field(default_factory=list)
    bbox_max: list[float] = field(default_factory=list)
    components: int = 0
    genus: int = 0
    centroid: list[float] = field(default_factory=list)
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else [round(x, 6) for x in v] if isinstance(v, list) else v)
                for k, v in self.__dict__.items()}


def _shells(triangles: np.ndarray, n: int) -> int:
    """Closed shells: triangles joined across shared edges (shells that only touch at a vertex,
    or a zero-volume fold glued to two shells, stay apart)."""
    m = len(triangles)
    a, b, c = (triangles[:, i].astype(np.int64) for i in range(3))
    undirected = np.concatenate([np.minimum(a, b) * n + np.maximum(a, b), np.minimum(b, c) * n + np.maximum(b, c),
                                 np.minimum(c, a) * n + np.maximum(c, a)])
    owner = np.concatenate([np.arange(m)] * 3)
    order = np.argsort(undirected, kind="stable")
    pairs = owner[order].reshape(-1, 2)  # every edge in exactly two triangles (checked before)
    return _components(pairs, m, edges=True)


def _components(triangles: np.ndarray, n: int, edges: bool = False) -> int:
    parent = np.arange(n)

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    links = triangles if edges else np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]]])
    for a, b in links.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    used = range(n) if edges else np.unique(triangles).tolist()
    return len({find(v) for v in used})


def analyse(vertices: np.ndarray, triangles: np.ndarray) -> Geometry:
    """Topology and measures of a triangle mesh (see the module docstring)."""
    m = len(triangles)
    if m == 0:
        return Geometry(0, False, problem="the mesh is empty")
    if not np.isfinite(vertices).all() or np.abs(vertices).max() > 1e6:
        return Geometry(m, False, problem="a vertex coordinate is not finite or beyond a kilometre")
    if triangles.min() < 0 or triangles.max() >= len(vertices):
        return Geometry(m, False, problem="a triangle names a vertex that does not exist")
    n = len(vertices)
    a, b, c = triangles[:, 0].astype(np.int64), triangles[:, 1].astype(np.int64), triangles[:, 2].astype(np.int64)
    directed = np.concatenate([a * n + b, b * n + c, c * n + a])
    reverse = np.concatenate([b * n + a, c * n + b, a * n + c])
    unique, counts = np.unique(directed, return_counts=True)
    watertight = bool((counts == 1).all() and np.array_equal(np.sort(reverse), unique) and (a != b).all()
                      and (b != c).all() and (a != c).all())
    v0, v1, v2 = vertices[triangles[:, 0]], vertices[triangles[:, 1]], vertices[triangles[:, 2]]
    cross = np.cross(v1 - v0, v2 - v0)
    signed = np.einsum("ij,ij->i", v0, np.cross(v1, v2)) / 6.0  # (m,) signed tetrahedron volumes
    volume = float(signed.sum())
    geometry = Geometry(m, watertight, volume=volume, area=float(np.linalg.norm(cross, axis=1).sum() / 2),
                        bbox_min=vertices[np.unique(triangles)].min(axis=0).tolist(),
                        bbox_max=vertices[np.unique(triangles)].max(axis=0).tolist())
    if not watertight:
        geometry.problem = "the mesh is not closed: some edge is not shared by exactly two triangles in opposite directions"
        return geometry
    keys = np.sort(triangles, axis=1)
    if len(np.unique(keys, axis=0)) != m:
        geometry.watertight = False
        geometry.problem = "two triangles share the same three vertices (a zero-thickness fold)"
        return geometry
    if (np.linalg.norm(cross, axis=1) <= 0).any():
        geometry.watertight = False
        geometry.problem = "a triangle has no area"
        return geometry
    geometry.components = _shells(triangles, n)
    used = len(np.unique(triangles))
    euler = used - (3 * m) // 2 + m  # V - E + F over every closed shell
    geometry.genus = int((2 * geometry.components - euler) // 2)
    if abs(volume) > 0:
        geometry.centroid = (((v0 + v1 + v2) / 4.0) * signed[:, None]).sum(axis=0) / volume
        geometry.centroid = [float(x) for x in geometry.centroid]
    return geometry


RAYS = [np.array(r) / np.linalg.norm(r) for r in ([0.0123, 0.0271, 1.0], [0.9, 0.0311, -0.0173], [-0.0219, -0.97, 0.0413])]
"""Directions of the parity rays (off every axis: no ray runs along a modelled edge or face)."""


def inside(vertices: np.ndarray, triangles: np.ndarray, points: list[list[float]]) -> list[bool | None]:
    """For each point, whether it lies inside the closed mesh: the parity of a ray's crossings,
    along three directions that must agree (None when they do not: a point on the surface, or a
    mesh that is not one closed solid there)."""
    v0, v1, v2 = vertices[triangles[:, 0]], vertices[triangles[:, 1]], vertices[triangles[:, 2]]
    e1, e2 = v1 - v0, v2 - v0
    votes = []
    for ray in RAYS:
        h = np.cross(ray, e2)
        det = np.einsum("ij,ij->i", e1, h)
        ok = np.abs(det) > 1e-12
        inv = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0)
        row = []
        for point in points:
            s = np.asarray(point, float) - v0
            u = np.einsum("ij,ij->i", s, h) * inv
            q = np.cross(s, e1)
            w = (q @ ray) * inv
            t = np.einsum("ij,ij->i", e2, q) * inv
            hits = ok & (u >= 0) & (w >= 0) & (u + w <= 1) & (t > 1e-9)
            row.append(bool(int(hits.sum()) % 2))
        votes.append(row)
    return [col[0] if len(set(col)) == 1 else None for col in zip(*votes)]


def parse_mesh(stdout: bytes) -> tuple[np.ndarray, np.ndarray] | str:
    """The mesh of the one marker line, or why there is none."""
    lines = [line for line in stdout.split(b"\n") if line.startswith(MARKER)]
    if len(lines) != 1:
        return f"{len(lines)} meshes written: one solid per answer" if lines else "no mesh written"
    parts = lines[0][len(MARKER):].split(b" ")
    if len(parts) != 2:
        return "the mesh line is malformed"
    try:
        raw_v, raw_t = base64.b64decode(parts[0], validate=True), base64.b64decode(parts[1], validate=True)
    except ValueError:
        return "the mesh line is malformed"
    if len(raw_v) % 24 or len(raw_t) % 12:
        return "the mesh line is malformed"
    vertices = np.frombuffer(raw_v, dtype="<f8").reshape(-1, 3)
    triangles = np.frombuffer(raw_t, dtype="<i4").reshape(-1, 3)
    if len(triangles) > MAX_TRIANGLES or len(vertices) > MAX_TRIANGLES:
        return f"{len(triangles)} triangles and {len(vertices)} vertices; at most {MAX_TRIANGLES} of each"
    return vertices, triangles


def _close(found: float, expected: float, check: dict[str, Any]) -> bool:
    tolerance = max(float(check.get("abs_tol", 0.0)), float(check.get("rel_tol", 0.0)) * abs(expected))
    return bool(np.isfinite(found)) and abs(found - expected) <= tolerance


def run_checks(geometry: Geometry, vertices: np.ndarray, triangles: np.ndarray, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each check with what was found and whether it holds."""
    out = []
    for check in checks:
        kind, expected = check["check"], check.get("expected")
        if kind in ("volume", "area"):
            found: Any = getattr(geometry, kind)
            ok = _close(found, expected, check)
        elif kind in ("bbox_min", "bbox_max", "centroid"):
            found = getattr(geometry, kind)
            axes = check.get("axes", "xyz")
            ok = len(found) == 3 and all(_close(found["xyz".index(a)], expected["xyz".index(a)], check) for a in axes)
        elif kind in ("genus", "components"):
            found = getattr(geometry, kind)
            ok = found == expected
        elif kind in ("inside", "outside"):
            found = inside(vertices, triangles, check["points"])
            ok = all(f is True for f in found) if kind == "inside" else all(f is False for f in found)
            found = sum(1 for f in found if f is (kind == "inside"))  # how many of the points hold
        elif kind == "diameter":  # the effective diameter of a prism along z: 2 sqrt(V / (pi h))
            height = geometry.bbox_max[2] - geometry.bbox_min[2] if geometry.bbox_max else 0.0
            found = 2 * float(np.sqrt(max(geometry.volume, 0.0) / (np.pi * height))) if height > 0 else 0.0
            ok = check["low"] <= found <= check["high"]
        else:
            raise ValueError(f"unknown CAD check {kind!r}")
        out.append({"check": kind, "ok": bool(ok), "found": found, **{k: v for k, v in check.items() if k not in ("check", "points")}})
    return out


def cad_job(completion: str) -> tuple[dict[str, str], list[str]]:
    """The sandbox job: the script and the runner."""
    return {MODEL_FILE: extract_code(completion)}, ["python3", "-I", "-S", "-c", RUNNER]


@sandbox_stage(DEFAULT_LIMITS)
def cad_mesh(completion: str, task: Task, run: SandboxRun) -> Verification:
    """Run the completion's script in the sandbox and check the solid against ``task.meta["checks"]``
    (params: ``limits``, ``backend``)."""
    if len(fenced_blocks(completion)) > 1:
        return Verification.failed(Outcome.PARSE_ERROR, error="more than one code block: one script per answer")
    code = extract_code(completion)
    if "result" not in code:
        return Verification.failed(Outcome.PARSE_ERROR, error="the script never assigns result")
    verdict = run(*cad_job(completion))
    if isinstance(verdict, Verification):
        return verdict
    status = str(getattr(verdict, "status", "sandbox_error"))
    stderr = (getattr(verdict, "stderr", b"") or b"").decode("utf-8", "replace")[-1500:]
    details: dict[str, Any] = {"status": status, "stderr": stderr, "wall_s": getattr(verdict, "wall_s", None)}
    if status != "ok":
        return Verification.failed(STATUS_OUTCOMES.get(status, Outcome.SANDBOX_ERROR), **details)
    mesh = parse_mesh(getattr(verdict, "stdout", b"") or b"")
    if isinstance(mesh, str):
        return Verification.failed(error=mesh, **details)
    vertices, triangles = mesh
    geometry = analyse(vertices, triangles)
    details["geometry"] = geometry.to_dict()
    if not geometry.watertight or not np.isfinite(geometry.volume) or geometry.volume <= 0:
        return Verification.failed(error=geometry.problem or "the solid has no volume (inside out?)", **details)
    results = run_checks(geometry, vertices, triangles, task.meta["checks"])
    details["checks"] = results
    if (picture := thumbnail_png(vertices, triangles)) is not None:
        details["thumbnail"] = picture
    details.update(artifacts.detail([Artifact.of("solid.stl", stl(vertices, triangles), STL_BYTES, truncate=False)]))
    failed = [r["check"] for r in results if not r["ok"]]
    if failed:
        return Verification.failed(error=f"checks failed: {', '.join(failed)}", **details)
    return Verification.passed(**details)


STL_BYTES = 512 << 10
"""The largest solid handed back as an artifact (about 10,000 triangles); a larger one is listed, refused."""


def stl(vertices: np.ndarray, triangles: np.ndarray) -> bytes:
    """The checked mesh as binary STL (what every CAD tool and slicer opens): the solid the verdict
    was read from, written by trusted code.

    >>> v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    >>> data = stl(v, np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]))
    >>> len(data), struct.unpack_from("<I", data, 80)[0]
    (284, 4)
    """
    v0, v1, v2 = (vertices[triangles[:, k]] for k in range(3))
    normals = np.cross(v1 - v0, v2 - v0)
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    rows = np.zeros(len(triangles), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    rows["n"], rows["v"] = normals, np.stack([v0, v1, v2], axis=1)
    return b"Temper solid".ljust(80, b" ") + struct.pack("<I", len(triangles)) + rows.tobytes()


THUMBNAIL_PIXELS = 72
THUMBNAIL_MAX_TRIANGLES = 30_000
VIEW = np.array([-1.0, -1.3, 0.9]) / np.linalg.norm([-1.0, -1.3, 0.9])
"""The thumbnail's view direction (from above, the front left)."""


def thumbnail_png(vertices: np.ndarray, triangles: np.ndarray, size: int = THUMBNAIL_PIXELS) -> str | None:
    """A small shaded picture of the solid as a PNG data URL (None for meshes too large to draw
    quickly): one orthographic ray per pixel, the nearest triangle it hits, lit by its normal."""
    if len(triangles) > THUMBNAIL_MAX_TRIANGLES or len(triangles) == 0:
        return None
    forward = -VIEW
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    v0, v1, v2 = vertices[triangles[:, 0]], vertices[triangles[:, 1]], vertices[triangles[:, 2]]
    e1, e2 = v1 - v0, v2 - v0
    normals = np.cross(e1, e2)
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    used = vertices[np.unique(triangles)]
    xs, ys = used @ right, used @ up
    centre = np.array([(xs.min() + xs.max()) / 2, (ys.min() + ys.max()) / 2])
    half = max(xs.max() - xs.min(), ys.max() - ys.min()) / 2 * 1.08 or 1.0
    start = used.mean(axis=0) - forward * (np.abs(used - used.mean(axis=0)).sum(axis=1).max() + 1.0)
    h = np.cross(forward, e2)  # (m, 3)
    det = np.einsum("ij,ij->i", e1, h)
    ok = np.abs(det) > 1e-12
    inv = np.where(ok, 1.0 / np.where(ok, det, 1.0), 0.0)
    image = np.full((size, size), 255, np.uint8)
    light = np.array([0.4, 0.3, 0.85]) / np.linalg.norm([0.4, 0.3, 0.85])
    for row in range(size):
        py = centre[1] + half * (1 - 2 * (row + 0.5) / size)
        px = centre[0] + half * (2 * (np.arange(size) + 0.5) / size - 1)  # (size,)
        origins = start[None, :] + (px - start @ right)[:, None] * right + (py - start @ up) * up  # (size, 3)
        s = origins[:, None, :] - v0[None, :, :]  # (size, m, 3)
        u = np.einsum("pmk,mk->pm", s, h) * inv
        q = np.cross(s, e1[None, :, :])
        w = (q @ forward) * inv
        t = np.einsum("mk,pmk->pm", e2, q) * inv
        hit = ok & (u >= 0) & (w >= 0) & (u + w <= 1) & (t > 0)
        t = np.where(hit, t, np.inf)
        nearest = t.argmin(axis=1)
        seen = np.isfinite(t[np.arange(size), nearest])
        shade = np.abs(normals[nearest] @ light)
        image[row, seen] = (60 + 170 * shade[seen]).astype(np.uint8)
    raw = b"".join(b"\x00" + image[r].tobytes() for r in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
