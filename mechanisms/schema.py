"""The public schema of a table and its encoding into histogram cells.

A schema is public metadata the custodian states once (a JSON document), for example::

    {"columns": [
       {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
       {"name": "hours", "type": "numeric", "lower": 0, "upper": 99, "bins": [0, 20, 40, 60, 99]},
       {"name": "sex", "type": "categorical", "categories": ["F", "M"], "unknown": "reject"},
       {"name": "fnlwgt", "type": "ignored"}]}

Numeric: values are clamped to [lower, upper] and binned; bins are half-open [a, b) except the
last, which includes `upper`. `bins` is a count (equal widths) or the explicit edges, which must
start at `lower` and end at `upper`. Missing or non-numeric values are refused.
Categorical: values are compared as text with the listed categories. A value outside the list
(or missing) goes to an extra cell labelled "(other)" when "unknown" is "other" (the default),
or makes encoding fail when it is "reject". The "(other)" cell exists whether or not any value
falls in it, so the domain never depends on the data.
Nothing here derives bounds, bins or categories from the data.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.chunks import table_chunks
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, resolve_rng
from mechanisms.persons import PersonLevel, schema_entries, split_schema

if TYPE_CHECKING:
    from mechanisms.chunks import ChunkedTable


OTHER_LABEL = "(other)"
MAX_CELLS = 10**8
CHUNK_ROWS = 1 << 20


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class NumericColumn:
    """A numeric column with public bounds and bin edges."""

    name: str
    lower: float
    upper: float
    edges: tuple[float, ...]
    equal_width: bool

    @property
    def n_cells(self) -> int:
        return len(self.edges) - 1

    def labels(self) -> list[str]:
        """Readable bin labels for spreadsheets and reports.

        "17 to under 26.125" (a bin holds
        its lower edge, not its upper one), the last bin "81.875 to 90" (both edges in).
        """
        e = self.edges
        return [
            f"{e[i]:g} to {'' if i == len(e) - 2 else 'under '}{e[i + 1]:g}"
            for i in range(len(e) - 1)
        ]

    def encode(self, values: AnyArray | pd.Series[Any], first_row: int = 0) -> AnyArray:
        """Bin indices of `values` after clamping to [lower, upper]."""
        values = _as_float(values, self.name)
        bad = np.isnan(values)
        if bad.any():
            raise MechanismError(
                f"column {self.name!r} has {int(bad.sum())} missing or non-numeric values "
                f"(first on data row {first_row + int(np.argmax(bad)) + 1}); clean them or mark "
                "the column ignored"
            )
        if self.equal_width:  # clamp before the cast: inf or 1e300 would not fit int64
            scaled = (values - self.lower) * (self.n_cells / (self.upper - self.lower))
            np.clip(scaled, 0, self.n_cells - 1, out=scaled)
            return np.floor(scaled, out=scaled).astype(np.int64)
        codes = np.searchsorted(np.asarray(self.edges[1:-1]), values, side="right")
        return np.clip(codes, 0, self.n_cells - 1, out=codes)

    def decode(self, codes: AnyArray, rng: RandomSource) -> AnyArray:
        """A value drawn uniformly inside each code's bin."""
        values = rng.uniform(len(codes))
        if self.equal_width:  # lower + (code + u) * width, in place
            values += codes
            values *= (self.upper - self.lower) / self.n_cells
            values += self.lower
            return values
        edges = np.asarray(self.edges)
        values *= np.diff(edges)[codes]
        values += edges[codes]
        return values

    def to_dict(self) -> dict[str, Any]:
        bins = self.n_cells if self.equal_width else list(self.edges)
        return {
            "name": self.name,
            "type": "numeric",
            "lower": self.lower,
            "upper": self.upper,
            "bins": bins,
        }


@dataclass(frozen=True)
class CategoricalColumn:
    """A categorical column with a public list of categories."""

    name: str
    categories: tuple[str, ...]
    unknown: str

    @property
    def n_cells(self) -> int:
        return len(self.categories) + (self.unknown == "other")

    def labels(self) -> list[str]:
        return list(self.categories) + ([OTHER_LABEL] if self.unknown == "other" else [])

    def encode(self, values: AnyArray | pd.Series[Any], first_row: int = 0) -> AnyArray:
        """Category indices; unknown values go to the "(other)" cell or are refused."""
        codes = self._category_indices(pd.Series(values, copy=False))
        unknown = codes < 0
        if unknown.any():
            if self.unknown == "reject":
                raise MechanismError(
                    f"column {self.name!r} has {int(unknown.sum())} values outside its declared "
                    f"categories (first on data row {first_row + int(np.argmax(unknown)) + 1}); "
                    'add them to the schema or set "unknown": "other"'
                )
            codes[unknown] = len(self.categories)
        return codes

    def _category_indices(self, values: pd.Series) -> AnyArray:
        """Index of each value's text among the categories, -1 if none.

        Text and integer columns are compared once per distinct value (their distinct values
        have distinct texts; floats and mixed objects may not: 0.0 and -0.0, 1 and True).
        """
        categories = pd.Index(self.categories)
        if values.dtype.kind in "iu" or isinstance(values.dtype, pd.StringDtype):
            codes, distinct = pd.factorize(values)  # missing values get -1
            known = categories.get_indexer(pd.Index(pd.Series(distinct).astype("string")))
            return np.append(known, -1).astype(np.int64)[codes]
        return categories.get_indexer(pd.Index(values.astype("string"))).astype(np.int64)

    def decode(self, codes: AnyArray, rng: RandomSource) -> AnyArray:
        """The category label of each code."""
        return np.asarray(self.labels(), dtype=object)[codes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": "categorical",
            "categories": list(self.categories),
            "unknown": self.unknown,
        }


@dataclass(frozen=True)
class IgnoredColumn:
    """A column the mechanisms never read."""

    name: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": "ignored"}


Column = NumericColumn | CategoricalColumn


def _as_float(values: AnyArray | pd.Series[Any], name: str) -> AnyArray:
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        return values.astype(np.float64, copy=False)
    return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=np.float64)


def _numeric_from_dict(d: dict[str, Any]) -> NumericColumn:
    name, lower, upper, bins = d["name"], d.get("lower"), d.get("upper"), d.get("bins")
    if not (_is_number(lower) and _is_number(upper)):
        raise MechanismError(
            f"column {name!r}: lower ({lower!r}) and upper ({upper!r}) must be finite numbers"
        )
    if not lower < upper:
        raise MechanismError(
            f"column {name!r}: lower ({lower!r}) must be below upper ({upper!r}); swap them"
        )
    if isinstance(bins, int) and not isinstance(bins, bool):
        if not 1 <= bins <= MAX_CELLS:
            raise MechanismError(
                f"column {name!r}: bins ({bins!r}) must be between 1 and {MAX_CELLS}"
            )
        edges = tuple(float(e) for e in np.linspace(lower, upper, bins + 1))
        return NumericColumn(name, float(lower), float(upper), edges, True)
    if not (isinstance(bins, list) and len(bins) >= 2 and all(_is_number(e) for e in bins)):
        raise MechanismError(
            f"column {name!r}: bins ({bins!r}) must be a count or a list of at least two edges"
        )
    if not (
        all(a < b for a, b in zip(bins, bins[1:], strict=False))
        and bins[0] == lower
        and bins[-1] == upper
    ):
        raise MechanismError(
            f"column {name!r}: bin edges ({bins!r}) must increase from lower ({lower!r}) "
            f"to upper ({upper!r})"
        )
    return NumericColumn(name, float(lower), float(upper), tuple(float(e) for e in bins), False)


def _categorical_from_dict(d: dict[str, Any]) -> CategoricalColumn:
    name, categories, unknown = d["name"], d.get("categories"), d.get("unknown", "other")
    if not (
        isinstance(categories, list)
        and categories
        and all(isinstance(c, str | int) and not isinstance(c, bool) for c in categories)
    ):
        raise MechanismError(
            f"column {name!r}: categories ({categories!r}) must be a non-empty list of texts"
        )
    labels = tuple(str(c) for c in categories)
    if len(set(labels)) != len(labels) or OTHER_LABEL in labels:
        raise MechanismError(
            f"column {name!r}: categories ({categories!r}) must be distinct and must not "
            f"include {OTHER_LABEL!r}"
        )
    if unknown not in ("other", "reject"):
        raise MechanismError(f'column {name!r}: unknown ({unknown!r}) must be "other" or "reject"')
    return CategoricalColumn(name, labels, unknown)


def _column_from_dict(d: dict[str, Any]) -> Column | IgnoredColumn:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
        raise MechanismError(f'schema column ({d!r}) must be an object with a non-empty "name"')
    kind = d.get("type")
    if kind == "numeric":
        return _numeric_from_dict(d)
    if kind == "categorical":
        return _categorical_from_dict(d)
    if kind == "ignored":
        return IgnoredColumn(d["name"])
    raise MechanismError(
        f"column {d['name']!r}: type ({kind!r}) must be numeric, categorical or ignored"
    )


class Schema:
    """Public metadata of a table: one spec per column, in file order."""

    def __init__(self, columns: list[Column | IgnoredColumn], person: PersonLevel | None = None):
        self.columns = {c.name: c for c in columns}
        self.person = person  # the person column (never released) and k; mechanisms.persons
        if len(self.columns) != len(columns):
            names = [c.name for c in columns]
            dup = next(n for n in names if names.count(n) > 1)
            raise MechanismError(
                f"schema column name ({dup!r}) appears twice; names must be unique"
            )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schema:
        """Build and validate a schema from its JSON form."""
        if not isinstance(d, dict) or not isinstance(d.get("columns"), list) or not d["columns"]:
            raise MechanismError(
                'schema must be an object {"columns": [...]} with at least one column'
            )
        entries, person = split_schema(d)
        if person is not None and person.column in {
            c.get("name") for c in entries if isinstance(c, dict)
        }:
            raise MechanismError(f"schema column name ({person.column!r}) appears twice")
        return cls([_column_from_dict(c) for c in entries], person)

    @classmethod
    def load(cls, path: str | Path) -> Schema:
        """Read a schema JSON file."""
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise MechanismError(
                f"schema file ({str(path)!r}) cannot be read: {exc.strerror}"
            ) from None
        except ValueError as exc:
            raise MechanismError(f"schema file ({str(path)!r}) is not valid JSON: {exc}") from None
        return cls.from_dict(document)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        document: dict[str, Any] = {"columns": [c.to_dict() for c in self.columns.values()]}
        if self.person is not None:
            column, top = schema_entries(self.person)
            document["columns"].insert(self.person.position, column)
            document.update(top)
        return document

    def column(self, name: str) -> Column:
        """The spec of a column a mechanism may use (not ignored)."""
        spec = self.columns.get(name)
        if spec is None:
            raise MechanismError(
                f"column ({name!r}) is not in the schema; known columns: {', '.join(self.columns)}"
            )
        if isinstance(spec, IgnoredColumn):
            raise MechanismError(
                f"column ({name!r}) is marked ignored in the schema; declare its "
                "type (numeric or categorical) to use it"
            )
        return spec

    def resolve_columns(self, columns: Sequence[str] | None = None) -> list[str]:
        """The requested column names, validated; None means every column that is not ignored."""
        if columns is None:
            columns = [n for n, c in self.columns.items() if not isinstance(c, IgnoredColumn)]
        elif isinstance(columns, str):
            columns = [columns]
        columns = list(columns)
        if not columns:
            raise MechanismError("columns (empty) must name at least one schema column")
        if len(set(columns)) != len(columns):
            raise MechanismError(f"columns ({columns!r}) must not repeat a column")
        for name in columns:
            self.column(name)
        return columns

    def domain_shape(self, columns: Sequence[str] | None) -> tuple[int, ...]:
        """Number of cells along each column, in order."""
        names = self.resolve_columns(columns)
        shape = tuple(self.column(n).n_cells for n in names)
        if math.prod(shape) > MAX_CELLS:
            raise MechanismError(
                f"columns {names} make {math.prod(shape)} cells, more than {MAX_CELLS}; "
                "use fewer bins or columns"
            )
        return shape

    def axis_labels(self, column: str) -> list[str]:
        """Human-readable label of each cell along a column."""
        return self.column(column).labels()

    def encode(self, data: pd.DataFrame, columns: Sequence[str] | None) -> AnyArray:
        """Cell index per column, shape (n, k), int64."""
        columns = self.resolve_columns(columns)
        _check_present(data, columns)
        codes = np.empty((len(data), len(columns)), dtype=np.int64)
        for j, name in enumerate(columns):
            codes[:, j] = self.column(name).encode(data[name].to_numpy())
        return codes

    def _flat_chunks(
        self, data: pd.DataFrame | ChunkedTable, columns: Sequence[str] | None
    ) -> Iterator[tuple[int, AnyArray]]:
        """Yield (start, flat cell index of one chunk's rows), row-major.

        `data` is a DataFrame, encoded CHUNK_ROWS rows at a time, or a ChunkedTable.
        """
        columns = self.resolve_columns(columns)
        shape = self.domain_shape(columns)
        dtype = np.int32 if math.prod(shape) < 2**31 else np.int64
        for start, piece in table_chunks(data, CHUNK_ROWS):
            _check_present(piece, columns)
            flat: AnyArray = np.zeros(len(piece), dtype=dtype)
            for name, size in zip(columns, shape, strict=True):
                flat *= size
                flat += self.column(name).encode(piece[name], start).astype(dtype)
            yield start, flat

    def cell_index(self, data: pd.DataFrame, columns: Sequence[str] | None) -> AnyArray:
        """Flat (row-major) cell index of each row."""
        chunks = [flat for _, flat in self._flat_chunks(data, columns)]
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)

    def cell_counts(
        self, data: pd.DataFrame | ChunkedTable, columns: Sequence[str] | None
    ) -> AnyArray:
        """Exact count of rows in each cell, shape `domain_shape(columns)`, int64.

        `data` is a DataFrame or a ChunkedTable; either is encoded chunk by chunk, so memory
        beyond the input stays small whatever the row count.
        """
        shape = self.domain_shape(columns)
        counts = np.zeros(math.prod(shape), dtype=np.int64)
        for _, flat in self._flat_chunks(data, columns):
            counts += np.bincount(flat, minlength=counts.size)
        return counts.reshape(shape)

    def decode(
        self, codes: AnyArray, columns: Sequence[str] | None, rng: RandomSource | None = None
    ) -> pd.DataFrame:
        """Rows from cell codes (n, k): uniform inside numeric bins, the label for categories."""
        columns, rng = self.resolve_columns(columns), resolve_rng(rng)
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(columns))
        return pd.DataFrame(
            {n: self.column(n).decode(codes[:, j], rng) for j, n in enumerate(columns)}
        )

    def decode_cells(
        self, flat: AnyArray, columns: Sequence[str] | None, rng: RandomSource | None = None
    ) -> pd.DataFrame:
        """Rows from flat cell indices, decoded in chunks into preallocated columns."""
        columns, rng = self.resolve_columns(columns), resolve_rng(rng)
        specs = [self.column(n) for n in columns]
        shape = self.domain_shape(columns)
        strides = [math.prod(shape[j + 1 :]) for j in range(len(shape))]
        out = {
            s.name: np.empty(
                len(flat), dtype=np.float64 if isinstance(s, NumericColumn) else object
            )
            for s in specs
        }
        for start in range(0, len(flat), CHUNK_ROWS):
            chunk = flat[start : start + CHUNK_ROWS]
            for spec, size, stride in zip(specs, shape, strides, strict=True):
                out[spec.name][start : start + len(chunk)] = spec.decode(
                    (chunk // stride) % size, rng
                )
        return pd.DataFrame(out, copy=False)


def _check_present(data: pd.DataFrame, columns: list[str]) -> None:
    missing = [n for n in columns if n not in data.columns]
    if missing:
        raise MechanismError(
            f"column ({missing[0]!r}) is in the schema but not in the data; "
            f"data columns: {', '.join(map(str, data.columns)) or '(none)'}"
        )
