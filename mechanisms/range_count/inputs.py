"""Public inputs of range counting: the support point set, snapping, and the query workload.

Everything here is public metadata (custodian-declared bounds, a grid or a public point list,
a workload of ranges). Nothing reads private counts except `Support.snap`, which maps each
record to one support point (the step that turns records into the private count vector).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mechanisms.arrays import AnyArray
from mechanisms.errors import MechanismError, parsed_json, shown

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


QUERY_TYPES = ("interval", "box", "halfspace")
_HALFSPACE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Support:
    """The public point set P: a grid of cell centres over the bounds, or a public point list."""

    columns: tuple[str, ...]
    lower: AnyArray  # (d,) public bounds from the schema
    upper: AnyArray
    points: AnyArray  # (n, d) coordinates of the support points
    grid_shape: tuple[int, ...] | None = None

    @property
    def n(self) -> int:
        return int(self.points.shape[0])

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    def snap(self, values: AnyArray) -> AnyArray:
        """Map records (N, d) to support indices; values are clamped to the public bounds."""
        values = np.asarray(values, dtype=float).reshape(-1, self.dim)
        if np.isnan(values).any():
            raise MechanismError("range-count columns contain missing values; drop or fill them")
        clamped = np.clip(values, self.lower, self.upper)
        if self.grid_shape is not None:
            return self._snap_grid(clamped)
        return self._snap_nearest(clamped)

    def _snap_grid(self, values: AnyArray) -> AnyArray:
        cells = self.grid_cells(values)
        assert self.grid_shape is not None  # only called by `snap` on a grid support
        # numpy's stubs pick the scalar overload for a tuple of index arrays.
        return cast(AnyArray, np.ravel_multi_index(tuple(cells.T), self.grid_shape))

    def axis_edges(self, axis: int) -> AnyArray:
        """The g + 1 edges of one grid axis: lower + k (upper - lower) / g, the last = upper."""
        assert self.grid_shape is not None
        g, lo, hi = self.grid_shape[axis], float(self.lower[axis]), float(self.upper[axis])
        edges = lo + np.arange(g + 1) * ((hi - lo) / g)
        edges[-1] = hi
        return edges

    def grid_cells(self, values: AnyArray) -> AnyArray:
        """Cell index per axis (N, d) of clamped values; monotone in each coordinate.

        Cell k holds exactly the values with edge k <= value < edge k + 1 (the last cell
        also holds the upper bound).
        """
        assert self.grid_shape is not None
        values = np.asarray(values, dtype=float)
        cells = np.empty(values.shape, dtype=np.int64)
        for j in range(len(self.grid_shape)):
            cells[:, j] = self.axis_cells(j, values[:, j], self.axis_edges(j))
        return cells

    def axis_cells(self, axis: int, values: AnyArray, edges: AnyArray) -> AnyArray:
        """Cell index on one grid axis (its `axis_edges`) of values clamped to its bounds."""
        assert self.grid_shape is not None
        clamped = np.clip(values, self.lower[axis], self.upper[axis])
        found = np.searchsorted(edges, clamped, side="right") - 1
        return np.clip(found, 0, self.grid_shape[axis] - 1)

    def edge(self, axis: int, k: int) -> float:
        """Grid edge number k of one axis (0 and g: the bounds).

        Records between edges k (included) and k + 1 (excluded) are snapped to cell k, so a
        box whose corners are grid edges is answered exactly.
        """
        edges = self.axis_edges(axis)
        return float(edges[min(max(k, 0), len(edges) - 1)])

    def _snap_nearest(self, values: AnyArray, block: int = 4096) -> AnyArray:
        scale = self.upper - self.lower
        pts = self.points / scale
        out = np.empty(len(values), dtype=np.int64)
        for start in range(0, len(values), block):
            chunk = values[start : start + block] / scale
            dist = ((chunk[:, None, :] - pts[None, :, :]) ** 2).sum(axis=2)
            out[start : start + block] = dist.argmin(axis=1)
        return out

    def counts(self, values: AnyArray) -> AnyArray:
        """Private count vector x (n,): number of records snapped to each support point.

        A record with a missing (NaN) coordinate is left out: the declared drop of range
        counting. Dropping is 1-stable (a changed row still moves at most its own point's
        count), so the plan's sensitivity and accounting hold unchanged and nothing extra is
        spent; the number dropped is not released.
        """
        values = np.asarray(values, dtype=float).reshape(-1, self.dim)
        values = values[~np.isnan(values).any(axis=1)]
        return np.bincount(self.snap(values), minlength=self.n).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "columns": list(self.columns),
            "lower": self.lower.tolist(),
            "upper": self.upper.tolist(),
        }
        if self.grid_shape is not None:
            out["grid"] = list(self.grid_shape)
        else:
            out["points"] = self.points.tolist()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Support:
        bounds = list(zip(d["lower"], d["upper"], strict=True))
        if "grid" in d:
            return grid_support(d["columns"], bounds, d["grid"])
        return point_support(d["columns"], bounds, d["points"])


def _check_bounds(columns: Sequence[str], bounds: Any) -> tuple[AnyArray, AnyArray]:
    if not 1 <= len(columns) <= 3:
        raise MechanismError(f"range counting takes 1 to 3 numeric columns, got {len(columns)}")
    if len(bounds) != len(columns):
        raise MechanismError(f"{len(bounds)} bounds given for {len(columns)} columns")
    lower = np.array([float(lo) for lo, _ in bounds])
    upper = np.array([float(hi) for _, hi in bounds])
    for name, lo, hi in zip(columns, lower, upper, strict=True):
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise MechanismError(
                f"bounds of column {name!r} ({lo}, {hi}) must be finite, lower < upper"
            )
    return lower, upper


def grid_support(columns: Sequence[str], bounds: Any, shape: tuple[int, ...]) -> Support:
    """Support = centres of a regular grid with `shape` cells over the public `bounds`."""
    lower, upper = _check_bounds(columns, bounds)
    shape = tuple(int(g) for g in shape)
    if len(shape) != len(columns) or min(shape) < 1:
        raise MechanismError(
            f"grid {'x'.join(map(str, shape))} must give >= 1 cell per column "
            f"for {len(columns)} columns"
        )
    if math.prod(shape) > 200_000:
        raise MechanismError(
            f"grid {'x'.join(map(str, shape))} has more than 200000 cells; use a coarser grid"
        )
    axes = [
        lo + (np.arange(g) + 0.5) * (hi - lo) / g
        for lo, hi, g in zip(lower, upper, shape, strict=True)
    ]
    mesh = np.meshgrid(*axes, indexing="ij")
    points = np.stack([m.ravel() for m in mesh], axis=1)
    return Support(tuple(columns), lower, upper, points, shape)


def point_support(columns: Sequence[str], bounds: Any, points: Any) -> Support:
    """Support = a public list of points (e.g. published centroids) inside the public bounds."""
    lower, upper = _check_bounds(columns, bounds)
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != len(columns) or len(pts) == 0:
        raise MechanismError(f"support points must be a non-empty list of {len(columns)}-vectors")
    if not np.isfinite(pts).all():
        raise MechanismError("support points must be finite numbers")
    return Support(tuple(columns), lower, upper, np.clip(pts, lower, upper), None)


def parse_grid(text: str, dims: int) -> tuple[int, ...]:
    """Parse '64x64' (or '64' for every column) into a grid shape."""
    try:
        parts = [int(p) for p in str(text).lower().split("x")]
    except ValueError:
        raise MechanismError(f"grid ({text!r}) must look like 64x64") from None
    if len(parts) == 1:
        parts = parts * dims
    if len(parts) != dims or min(parts) < 1:
        raise MechanismError(
            f"grid ({text!r}) needs {dims} positive sizes, like {'x'.join(['64'] * dims)}"
        )
    return tuple(parts)


# ---------------------------------------------------------------- workload


def _vector(q: dict[str, Any], key: str, dim: int, k: int) -> AnyArray:
    value = q.get(key)
    if value is None:
        raise MechanismError(f"query {k}: missing {key!r}")
    refused = MechanismError(f"query {k}: {key!r} ({shown(value)}) must be {dim} finite numbers")
    items = value if isinstance(value, list) else [value]
    if any(isinstance(item, bool) for item in items):  # true is no bound (NumPy reads 1)
        raise refused
    try:
        arr = np.atleast_1d(np.asarray(value, dtype=float))
    except (TypeError, ValueError, OverflowError):  # words, objects, ragged lists, 10**400
        raise refused from None
    if arr.shape != (dim,) or not np.isfinite(arr).all():
        raise refused
    return arr


def _finite(number: int | float) -> bool:
    """Whether a JSON number is a finite float (a whole number past 1.8e308 is not)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


LARGEST_WEIGHT = 2.0**64  # above it, a·x may overflow at a column's values


def _within_range(a: AnyArray, b: float) -> tuple[AnyArray, float]:
    """The same halfspace a·x <= b, scaled down when a weight or b is above LARGEST_WEIGHT.

    Scaled by the power of two that brings the largest below 1 (exact; a weight more than
    2^1074 times smaller than the largest becomes 0, beyond any double's precision in a·x), so
    that a·x no longer overflows to infinity and answers another range.
    """
    largest = max(float(np.abs(a).max(initial=0.0)), abs(b))
    if largest <= LARGEST_WEIGHT:
        return a, b
    shift = -math.frexp(largest)[1]
    return np.ldexp(a, shift), math.ldexp(b, shift)


def normalize_query(q: dict[str, Any], dim: int, k: int = 0) -> dict[str, Any]:
    """Validate one query dict and return it in canonical form (lists of floats)."""
    if not isinstance(q, dict):
        raise MechanismError(f"query {k} ({q!r}) must be an object with a 'type'")
    kind = q.get("type")
    if kind not in QUERY_TYPES:
        raise MechanismError(f"query {k}: type ({kind!r}) must be one of {', '.join(QUERY_TYPES)}")
    if kind == "halfspace":
        a = _vector(q, "a", dim, k)
        b = q.get("b")
        if isinstance(b, bool) or not isinstance(b, int | float) or not _finite(b):
            raise MechanismError(f"query {k}: b ({shown(b)}) must be a finite number")
        a, b = _within_range(a, float(b))
        return {"type": "halfspace", "a": a.tolist(), "b": b}
    if kind == "interval" and dim != 1:
        raise MechanismError(f"query {k}: an interval needs 1 column, not {dim}; use a box")
    lo, hi = _vector(q, "lo", dim, k), _vector(q, "hi", dim, k)
    if (lo > hi).any():
        raise MechanismError(f"query {k}: lo ({lo.tolist()}) must be <= hi ({hi.tolist()})")
    return {"type": "box", "lo": lo.tolist(), "hi": hi.tolist()}


def normalize_queries(queries: Any, dim: int) -> list[dict[str, Any]]:
    """Validate a list of queries; an empty workload is an error."""
    if not isinstance(queries, list) or not queries:
        raise MechanismError(
            "the workload is empty: give the ranges to answer (a JSON or CSV file of intervals, "
            "boxes or halfspaces: --workload FILE on the command line) or generate some "
            "(--random-boxes M or --random-halfspaces M)"
        )
    return [normalize_query(q, dim, k) for k, q in enumerate(queries)]


def load_workload(
    text: str, columns: tuple[str, ...], *, fmt: str = "json"
) -> list[dict[str, Any]]:
    """Read a workload from JSON ({"queries": [...]} or a list) or CSV text.

    CSV columns: `type`, then `lo_<col>`, `hi_<col>` for boxes, `a_<col>` and `b` for halfspaces.
    """
    dim = len(columns)
    if fmt == "csv":
        return normalize_queries(_queries_from_csv(text, columns), dim)
    try:
        doc = parsed_json(text)
    except json.JSONDecodeError as exc:
        raise MechanismError(
            f"workload is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    queries = doc.get("queries") if isinstance(doc, dict) else doc
    return normalize_queries(queries, dim)


def _queries_from_csv(text: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    queries = []
    for row in csv.DictReader(io.StringIO(text)):
        kind = (row.get("type") or "").strip()
        try:
            if kind == "halfspace":
                queries.append(
                    {
                        "type": kind,
                        "a": [float(row[f"a_{c}"]) for c in columns],
                        "b": float(row["b"]),
                    }
                )
            else:
                queries.append(
                    {
                        "type": kind,
                        "lo": [float(row[f"lo_{c}"]) for c in columns],
                        "hi": [float(row[f"hi_{c}"]) for c in columns],
                    }
                )
        except (KeyError, ValueError, TypeError) as exc:
            raise MechanismError(
                f"workload CSV row {len(queries) + 1}: bad or missing field {exc}"
            ) from None
    return queries


def _standard_normal_from_uniform(rng: RandomSource, shape: tuple[int, ...]) -> AnyArray:
    """Box-Muller from the source's uniform draws: public randomness, not a noise primitive."""
    u1, u2 = rng.uniform(shape), rng.uniform(shape)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)


def spread_points(count: int, dims: int) -> np.ndarray:
    """`count` fixed points spread evenly over the unit cube [0, 1)^dims.

    The additive R_d sequence: the same sample boxes every time, with no random source to seed.
    """
    phi = 2.0
    for _ in range(32):  # the root of x^(dims+1) = x + 1
        phi = (1 + phi) ** (1 / (dims + 1))
    steps = phi ** -np.arange(1, dims + 1)
    return (0.5 + np.arange(1, count + 1)[:, None] * steps) % 1.0


def random_halfspaces(support: Support, m: int, rng: RandomSource) -> list[dict[str, Any]]:
    """M halfspaces a·x <= b with a random direction, through a random support point (public)."""
    if m < 1:
        raise MechanismError(f"number of random halfspaces ({m}) must be >= 1")
    scale = support.upper - support.lower
    normals = _standard_normal_from_uniform(rng, (m, support.dim)) / scale
    anchors = support.points[np.minimum((rng.uniform(m) * support.n).astype(int), support.n - 1)]
    offsets = (normals * anchors).sum(axis=1)
    return [
        {"type": "halfspace", "a": a.tolist(), "b": float(b)}
        for a, b in zip(normals, offsets, strict=True)
    ]


def random_boxes(support: Support, m: int, rng: RandomSource) -> list[dict[str, Any]]:
    """M boxes with uniformly random corners inside the public bounds.

    On a grid the corners are snapped to its edges (`snap_box`): answered with no rounding.
    """
    if m < 1:
        raise MechanismError(f"number of random boxes ({m}) must be >= 1")
    span = support.upper - support.lower
    u = support.lower + rng.uniform((m, 2, support.dim)) * span
    lo, hi = u.min(axis=1), u.max(axis=1)
    return [snap_box(support, a.tolist(), b.tolist()) for a, b in zip(lo, hi, strict=True)]


def all_prefixes(support: Support) -> list[dict[str, Any]]:
    """One box from the lower corner to each support point (all prefixes on a grid).

    On a grid the box ends at the point's cell's upper edges: exactly the cells up to it.
    """
    if support.grid_shape is None:
        return [
            {"type": "box", "lo": support.lower.tolist(), "hi": p.tolist()} for p in support.points
        ]
    edges = [grid_edges(support, j)[1:] for j in range(support.dim)]
    cells = np.array(np.unravel_index(np.arange(support.n), support.grid_shape)).T
    return [
        {
            "type": "box",
            "lo": support.lower.tolist(),
            "hi": [float(e[k]) for e, k in zip(edges, c, strict=True)],
        }
        for c in cells
    ]


def incidence(support: Support, queries: list[dict[str, Any]], block: int = 4096) -> AnyArray:
    """Bit-packed incidence (m, ceil(n/8)) of the queries restricted to the support points."""
    m, n = len(queries), support.n
    out = np.zeros((m, (n + 7) // 8), dtype=np.uint8)
    for start in range(0, m, block):
        chunk = queries[start : start + block]
        out[start : start + len(chunk)] = np.packbits(_dense_incidence(support, chunk), axis=1)
    return out


def _dense_incidence(support: Support, queries: list[dict[str, Any]]) -> AnyArray:
    pts = support.points
    rows = np.zeros((len(queries), support.n), dtype=bool)
    half = [k for k, q in enumerate(queries) if q["type"] == "halfspace"]
    if half:
        a = np.array([queries[k]["a"] for k in half])
        b = np.array([queries[k]["b"] for k in half])
        extent = np.maximum(abs(support.lower), abs(support.upper))
        tol = _HALFSPACE_TOLERANCE * (1.0 + np.abs(a) @ extent)
        rows[half] = (a @ pts.T) <= (b + tol)[:, None]
    for k, q in enumerate(queries):
        if q["type"] != "halfspace":
            lo, hi = np.asarray(q["lo"]), np.asarray(q["hi"])
            rows[k] = ((pts >= lo) & (pts <= hi)).all(axis=1)
    return rows


def workload_kinds(queries: list[dict[str, Any]]) -> set[str]:
    """The set of query types present ('box' covers intervals)."""
    return {q["type"] for q in queries}


# ---------------------------------------------------------------- grid rounding bounds


def grid_edges(support: Support, axis: int) -> AnyArray:
    """The g + 1 edges of one grid axis (see `Support.grid_cells`)."""
    return support.axis_edges(axis)


def rounding_bounds(
    support: Support, queries: list[dict[str, Any]], block: int = 512
) -> tuple[AnyArray, AnyArray] | None:
    """Packed incidences (inner, outer) of the grid cells inside and touching each query.

    A record counts in a box when lo <= value < hi on every axis (a box reaching an upper
    bound includes it; values outside the bounds count at the nearest bound, as they are
    snapped); in a halfspace when a·value <= b. Every record of an inner cell is in the
    query and every record in the query lies in an outer cell, so inner count <= true count
    <= outer count. Boxes use the snapping function itself (exact); halfspaces test the cell's
    corners with a relative tolerance of 1e-9 widening the gap. None for point supports
    (nearest-point snapping has no cells to bound with).
    """
    if support.grid_shape is None:
        return None
    edges = [grid_edges(support, j) for j in range(support.dim)]
    inner = np.zeros((len(queries), (support.n + 7) // 8), dtype=np.uint8)
    outer = np.zeros_like(inner)
    for start in range(0, len(queries), block):
        chunk = queries[start : start + block]
        masks = _chunk_masks(support, edges, chunk)
        inner[start : start + len(chunk)] = np.packbits(masks[0], axis=1)
        outer[start : start + len(chunk)] = np.packbits(masks[1], axis=1)
    return inner, outer


def _chunk_masks(
    support: Support, edges: list[AnyArray], queries: list[dict[str, Any]]
) -> tuple[AnyArray, AnyArray]:
    """Dense (inner, outer) cell masks (m, n) of queries on a grid: boxes at once."""
    assert support.grid_shape is not None
    inner = np.zeros((len(queries), support.n), dtype=bool)
    outer = np.zeros_like(inner)
    boxes = [k for k, q in enumerate(queries) if q["type"] != "halfspace"]
    if boxes:
        lo = np.array([queries[k]["lo"] for k in boxes], dtype=float).reshape(-1, support.dim)
        hi = np.array([queries[k]["hi"] for k in boxes], dtype=float).reshape(-1, support.dim)
        inner[boxes], outer[boxes] = _box_masks(support, edges, lo, hi)
    halves = [k for k, q in enumerate(queries) if q["type"] == "halfspace"]
    if halves:
        a = np.array([queries[k]["a"] for k in halves], dtype=float).reshape(-1, support.dim)
        b = np.array([float(queries[k]["b"]) for k in halves])
        inner[halves], outer[halves] = _halfspace_masks(support.grid_shape, edges, a, b)
    return inner, outer


def _box_masks(
    support: Support, edges: list[AnyArray], lo: AnyArray, hi: AnyArray
) -> tuple[AnyArray, AnyArray]:
    """(inner, outer) cell masks (m, n) of the boxes [lo, hi) (m, d): per axis spans, crossed."""
    assert support.grid_shape is not None
    shape = support.grid_shape
    inner = np.ones((len(lo), *shape), dtype=bool)
    outer = np.ones_like(inner)
    for j, g in enumerate(shape):
        first, last, first_in, last_in = _axis_spans(support, j, edges[j], lo[:, j], hi[:, j])
        cells = np.arange(g)
        view = [len(lo)] + [1] * len(shape)
        view[j + 1] = g
        outer &= ((cells >= first[:, None]) & (cells <= last[:, None])).reshape(view)
        inner &= ((cells >= first_in[:, None]) & (cells <= last_in[:, None])).reshape(view)
    return inner.reshape(len(lo), -1), outer.reshape(len(lo), -1)


def _axis_spans(
    support: Support, axis: int, edges: AnyArray, lo: AnyArray, hi: AnyArray
) -> tuple[AnyArray, AnyArray, AnyArray, AnyArray]:
    """(first, last) touched and (first, last) fully inside cells of each [lo, hi) on one axis.

    As the snapping function places values (`axis_cells`); a span with first > last is empty
    (no value lies in the range).
    """
    assert support.grid_shape is not None
    g, lower, upper = support.grid_shape[axis], support.lower[axis], support.upper[axis]

    def cell(v: AnyArray) -> AnyArray:
        return support.axis_cells(axis, v, edges)

    from_lower, to_upper = lo <= lower, hi >= upper
    first = np.where(from_lower, 0, cell(lo))
    first_inside = from_lower | (cell(np.nextafter(lo, -math.inf)) < first)
    last = np.where(to_upper, g - 1, cell(np.nextafter(hi, -math.inf)))
    last_inside = to_upper | (cell(hi) > last)
    empty = (lo > upper) | ((hi <= lower) & (hi < upper)) | ((lo >= hi) & (hi < upper))
    return (
        np.where(empty, g, first),
        np.where(empty, g - 1, last),
        np.where(empty, g, first + ~first_inside),
        np.where(empty, g - 1, last - ~last_inside),
    )


def _halfspace_masks(
    shape: tuple[int, ...], edges: list[AnyArray], a: AnyArray, b: AnyArray, cells: int = 1 << 22
) -> tuple[AnyArray, AnyArray]:
    """(inner, outer) cell masks (m, n) of the halfspaces a·x <= b (a: (m, d), b: (m,)).

    A cell's lowest and highest a·x over its corners, summed axis by axis, are compared with b
    widened by the tolerance. Halfspaces are taken together, at most ``cells`` floats at once.
    """
    n = math.prod(shape)
    inner = np.empty((len(a), n), dtype=bool)
    outer = np.empty_like(inner)
    step = max(1, cells // n)
    for start in range(0, len(a), step):
        rows = slice(start, start + step)
        inner[rows], outer[rows] = _halfspace_block(shape, edges, a[rows], b[rows])
    return inner, outer


def _halfspace_block(
    shape: tuple[int, ...], edges: list[AnyArray], a: AnyArray, b: AnyArray
) -> tuple[AnyArray, AnyArray]:
    m = len(a)
    low = np.zeros((m, *shape))
    high = np.zeros((m, *shape))
    extent = np.zeros(m)
    for j, e in enumerate(edges):
        starts, ends = a[:, j, None] * e[None, :-1], a[:, j, None] * e[None, 1:]
        view = [m] + [1] * len(shape)
        view[j + 1] = shape[j]
        low += np.minimum(starts, ends).reshape(view)
        high += np.maximum(starts, ends).reshape(view)
        extent += np.abs(a[:, j]) * float(np.abs(e).max())
    tol = (_HALFSPACE_TOLERANCE * (1.0 + extent + np.abs(b))).reshape([m] + [1] * len(shape))
    limit = b.reshape(tol.shape)
    return (high <= limit - tol).reshape(m, -1), (low <= limit + tol).reshape(m, -1)


def records_in(support: Support, values: AnyArray, query: dict[str, Any]) -> AnyArray:
    """Which records (N, d) lie in the range as asked (the semantics `rounding_bounds` bounds).

    Reads raw values: for the custodian's own comparison and for tests, never for a release.
    """
    clamped = np.clip(np.asarray(values, dtype=float), support.lower, support.upper)
    if query["type"] == "halfspace":
        return cast(AnyArray, clamped @ np.asarray(query["a"]) <= query["b"])
    lo, hi = np.asarray(query["lo"]), np.asarray(query["hi"])
    below = (clamped < hi) | (hi >= support.upper)
    return cast(AnyArray, ((clamped >= lo) & below).all(axis=1))


def snap_box(support: Support, lo: Sequence[float], hi: Sequence[float]) -> dict[str, Any]:
    """The box of grid edges nearest to [lo, hi): answered exactly, with no rounding.

    Each corner moves to the nearest grid edge; a box that would become empty keeps one cell.
    On a point support the box is returned unchanged.
    """
    if support.grid_shape is None:
        return {"type": "box", "lo": list(map(float, lo)), "hi": list(map(float, hi))}
    new_lo, new_hi = [], []
    for j, g in enumerate(support.grid_shape):
        width = (support.upper[j] - support.lower[j]) / g
        a = int(np.clip(round((lo[j] - support.lower[j]) / width), 0, g))
        b = int(np.clip(round((hi[j] - support.lower[j]) / width), 0, g))
        a, b = min(a, b), max(a, b)
        if a == b:
            a, b = (a, a + 1) if a < g else (a - 1, a)
        new_lo.append(support.edge(j, a))
        new_hi.append(support.edge(j, b))
    return {"type": "box", "lo": new_lo, "hi": new_hi}
