"""Query workloads for MWEM, given as JSON data so the portal and the CLI can pass them.

A workload document is ``{"queries": [entry, ...]}``; each entry is one of

* ``{"type": "marginals", "k": 2}``: every k-way marginal over the selected columns;
* ``{"type": "marginals", "subsets": [["age", "sex"], ...]}``: the marginals on chosen subsets;
* ``{"type": "datacube", "max_size": 3}``: every marginal over 1..max_size columns;
* ``{"type": "ranges", "column": "age"}``: every interval [lo, hi] of bins of an ordered
  (binned numeric) column, one counting query each;
* ``{"type": "boxes", "columns": ["age", "hours"], "boxes": [[[lo, hi], [lo, hi]], ...]}``:
  explicit boxes of bin ranges (inclusive) over ordered columns.

Entries mix freely. A workload is public: it must not be chosen by looking at the data.
``random_marginals_spec`` and ``random_boxes_spec`` draw workloads from a caller-supplied
random source (public randomness, e.g. a seeded one in the CLI or a benchmark).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mechanisms.errors import MechanismError, parsed_json

if TYPE_CHECKING:
    from mechanisms.noise import RandomSource


__all__ = [
    "Query",
    "expand_workload",
    "load_workload",
    "marginals_spec",
    "random_boxes_spec",
    "random_marginals_spec",
]


@dataclass(frozen=True)
class Query:
    """One unit MWEM can select: a whole marginal (vector answer) or one box count (scalar).

    ``attrs`` are sorted column positions. ``box`` is None for a marginal, else one inclusive
    ``(lo, hi)`` bin range per attribute in ``attrs``.
    """

    attrs: tuple[int, ...]
    box: tuple[tuple[int, int], ...] | None = None

    def cells(self, shape: tuple[int, ...]) -> int:
        """Number of answers this query releases (1 for a box)."""
        return 1 if self.box is not None else math.prod(shape[a] for a in self.attrs)

    def describe(self, columns: list[str]) -> dict[str, Any]:
        """A JSON-ready description with column names, for measurements.json and traces."""
        names = [columns[a] for a in self.attrs]
        if self.box is None:
            return {"type": "marginal", "columns": names}
        return {"type": "box", "columns": names, "bins": [list(r) for r in self.box]}


def marginals_spec(k: int) -> dict[str, Any]:
    """The workload document for all k-way marginals (``--marginals K`` on the CLI)."""
    return {"queries": [{"type": "marginals", "k": k}]}


def load_workload(path: str | Path) -> dict[str, Any]:
    """Read a workload JSON document; a missing or malformed file raises MechanismError."""
    try:
        # Typed as the object it should be; expand_workload checks what it really is.
        spec: dict[str, Any] = parsed_json(Path(path).read_text())
        return spec
    except OSError as exc:
        raise MechanismError(f"workload file ({path}) cannot be read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise MechanismError(f"workload file ({path}) is not valid JSON: {exc.msg}") from None


def expand_workload(
    spec: dict[str, Any], columns: list[str], shape: tuple[int, ...], ordered: set[str]
) -> list[Query]:
    """Turn a workload document into a de-duplicated list of queries over ``columns``.

    ``shape`` is the public domain shape (bins per column); ``ordered`` names the columns
    whose bins are ordered (binned numeric), the only ones ranges and boxes may use.
    """
    entries = spec.get("queries") if isinstance(spec, dict) else None
    if not isinstance(entries, list) or not entries:
        raise MechanismError(
            f"workload ({_short(spec)}) must be an object with a non-empty 'queries' list"
        )
    queries: dict[Query, None] = {}
    for entry in entries:
        for query in _expand_entry(entry, columns, shape, ordered):
            queries[query] = None
    return list(queries)


def _expand_entry(
    entry: Any, columns: Sequence[str], shape: tuple[int, ...], ordered: set[str]
) -> list[Query]:
    kind = entry.get("type") if isinstance(entry, dict) else None
    d = len(columns)
    if kind == "marginals" and "k" in entry:
        k = _int_in(entry["k"], "marginals k", 1, d)
        return [Query(c) for c in itertools.combinations(range(d), k)]
    if kind == "marginals" and "subsets" in entry:
        return [Query(_positions(s, columns)) for s in _list(entry["subsets"], "subsets")]
    if kind == "datacube":
        top = _int_in(entry.get("max_size"), "datacube max_size", 1, d)
        return [Query(c) for k in range(1, top + 1) for c in itertools.combinations(range(d), k)]
    if kind == "ranges":
        (a,) = _positions([entry.get("column")], columns, ordered)
        bins = shape[a]
        return [Query((a,), ((lo, hi),)) for lo in range(bins) for hi in range(lo, bins)]
    if kind == "boxes":
        names = entry.get("columns")
        _positions(names, columns, ordered)
        attrs = [columns.index(n) for n in names]
        return [_box(attrs, b, shape) for b in _list(entry.get("boxes"), "boxes")]
    raise MechanismError(
        f"workload entry ({_short(entry)}) is not understood; use type 'marginals' (with 'k' or "
        "'subsets'), 'datacube' (with 'max_size'), 'ranges' (with 'column') or 'boxes'"
    )


def _positions(
    names: Any, columns: Sequence[str], ordered: set[str] | None = None
) -> tuple[int, ...]:
    if not isinstance(names, list) or not names:
        raise MechanismError(f"workload columns ({_short(names)}) must be a non-empty list")
    for name in names:
        if name not in columns:
            raise MechanismError(
                f"workload column ({name!r}) is not among the released columns {columns}"
            )
        if ordered is not None and name not in ordered:
            raise MechanismError(
                f"workload column ({name!r}) is not an ordered (binned numeric) column; "
                "ranges and boxes need one"
            )
    if len(set(names)) != len(names):
        raise MechanismError(f"workload columns ({names}) repeat a column")
    return tuple(sorted(columns.index(n) for n in names))


def _box(attrs: list[int], ranges: Any, shape: tuple[int, ...]) -> Query:
    """A box from one [lo, hi] per column in ``attrs`` (listed order), stored in column order."""
    if not isinstance(ranges, list) or len(ranges) != len(attrs):
        raise MechanismError(f"box ({_short(ranges)}) needs one [lo, hi] bin range per column")
    checked = []
    for a, pair in zip(attrs, ranges, strict=True):
        ok = isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) for v in pair)
        if not ok or not 0 <= pair[0] <= pair[1] < shape[a]:
            raise MechanismError(
                f"box range ({_short(pair)}) must be [lo, hi] with 0 <= lo <= hi < {shape[a]}"
            )
        checked.append((a, (pair[0], pair[1])))
    checked.sort()
    return Query(tuple(a for a, _ in checked), tuple(r for _, r in checked))


def _int_in(value: Any, what: str, lo: float, hi: float) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise MechanismError(f"{what} ({value!r}) must be an integer from {lo} to {hi}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise MechanismError(f"workload {what} ({_short(value)}) must be a non-empty list")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def random_marginals_spec(
    columns: list[str], k: int, count: int, rng: RandomSource
) -> dict[str, Any]:
    """A workload of ``count`` distinct k-way marginals drawn uniformly from a public source.

    ``rng`` is a RandomSource used for public randomness only (the workload is public);
    for example ``seeded_source(seed)`` in a benchmark.
    """
    d = len(columns)
    _int_in(k, "k", 1, d)
    count = min(count, math.comb(d, k))
    chosen: dict[tuple[int, ...], None] = {}
    while len(chosen) < count:
        draws = rng.uniform(size=(count, k))
        for row in (draws * d).astype(int):
            subset = tuple(sorted(set(row.tolist())))
            if len(subset) == k and len(chosen) < count:
                chosen[subset] = None
    subsets = [[columns[a] for a in s] for s in chosen]
    return {"queries": [{"type": "marginals", "subsets": subsets}]}


def random_boxes_spec(
    columns: list[str], bins: list[int], count: int, rng: RandomSource
) -> dict[str, Any]:
    """A workload of ``count`` random boxes over ordered ``columns`` with ``bins`` bins each.

    Each side is the interval between two uniform bin indices (public randomness from ``rng``).
    """
    scale = np.asarray(bins, dtype=float)[None, :, None]
    ends = (rng.uniform(size=(count, len(columns), 2)) * scale).astype(int)
    boxes = [[sorted(pair) for pair in box.tolist()] for box in ends]
    return {"queries": [{"type": "boxes", "columns": list(columns), "boxes": boxes}]}
