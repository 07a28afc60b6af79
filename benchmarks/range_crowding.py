"""How crowded real rows are in the cells a range cuts: the source of planner.DEFAULT_CROWDING.

The range-count planner bounds an answer's grid rounding by B_k (`range_count.promise.
rounding_bound`: each cut cell holding an even share n / cells of the rows, evenly within the
cell, the cells' errors adding up), times the stated crowding. Here, on public tables with
schema bounds chosen from public knowledge (not from the rows), for random off-grid boxes and
(two columns) random halfspaces on grids of 8 to 64 cells per column: the 95th percentile of
the actual rounding |r_k| (true count of the cells counted minus the true count of the range,
from the rows) against that of B_k, their ratio (the crowding that would make the bound's 95th
percentile reach the actual one), and the 95th percentile of the per-range ratio |r_k| / B_k.

Tables: the Adult sample, cars, co2 and seattle_weather (tests/real_tables.py: the tables the
default was chosen on), then airports, seattle-temps, sf-temps, stocks and iris from
vega_datasets, held out.

    nice -n 10 .venv/bin/python benchmarks/range_crowding.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms.noise import secure_source  # noqa: E402
from mechanisms.range_count import api  # noqa: E402
from mechanisms.range_count.inputs import incidence, random_halfspaces, records_in  # noqa: E402
from mechanisms.range_count.promise import rounding_bound  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402
from tests.mechanisms import planner_cases  # noqa: E402

TUNE = [
    ("adult", ("age", "hours-per-week")),
    ("cars", ("Horsepower", "Weight_in_lbs")),
    ("co2", ("co2",)),
    ("seattle_weather", ("temp_max", "temp_min")),
    ("seattle_weather", ("temp_max", "precipitation")),
]
BOUNDS = {  # held-out tables: bounds from public knowledge (the globe, a day, a thermometer)
    "airports": {"latitude": (15, 75), "longitude": (-180, -60)},
    "seattle_temps": {"temp": (0, 110), "hour": (0, 24)},
    "sf_temps": {"temp": (20, 110), "hour": (0, 24)},
    "stocks": {"price": (0, 800)},
    "iris": {"sepalLength": (0, 10), "petalLength": (0, 10)},
}
GRIDS = (8, 16, 32, 64)
BOXES, HALFSPACES = 200, 100


def held_out(name):
    from vega_datasets import local_data

    frame = getattr(local_data, name)()
    if "date" in frame:
        frame["hour"] = frame["date"].dt.hour
    columns = [
        {"name": c, "type": "numeric", "lower": lo, "upper": hi, "bins": 8}
        for c, (lo, hi) in BOUNDS[name].items()
    ]
    return Schema.from_dict({"columns": columns}), frame, tuple(BOUNDS[name])


def figures(schema, frame, columns, grid, generator):
    values = np.column_stack(
        [np.asarray(schema.column(c).numbers(frame[c]), dtype=float) for c in columns]
    )
    values = values[~np.isnan(values).any(axis=1)]
    support = api.support_from_schema(schema, list(columns), {"grid": [grid] * len(columns)})
    corners = support.lower + generator.uniform(size=(BOXES, 2, len(columns))) * (
        support.upper - support.lower
    )
    ranges = [{"type": "box", "lo": c.min(0).tolist(), "hi": c.max(0).tolist()} for c in corners]
    if len(columns) == 2:
        ranges += random_halfspaces(support, HALFSPACES, secure_source())
    counted = np.unpackbits(incidence(support, ranges), axis=1, count=support.n).astype(float)
    true = np.array([records_in(support, values, q).sum() for q in ranges])
    actual = np.abs(counted @ support.counts(values) - true)
    bound = rounding_bound(support, ranges, len(values))
    ratio = actual[bound > 0] / bound[bound > 0]
    q_actual, q_bound = np.quantile(actual, 0.95), np.quantile(bound, 0.95)
    return q_actual, q_bound, q_actual / max(q_bound, 1e-9), np.quantile(ratio, 0.95)


def main() -> None:
    generator = np.random.default_rng(3)
    print("| split | table | columns | grid | 95th pct rounding | 95th pct bound | ratio | "
          "95th pct of rounding / bound |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for split, name, (schema, frame, columns) in [
        *[("tune", t, (*planner_cases.load(t), c)) for t, c in TUNE],
        *[("held-out", t, held_out(t)) for t in BOUNDS],
    ]:
        for grid in GRIDS:
            q_actual, q_bound, ratio, per_range = figures(schema, frame, columns, grid, generator)
            print(
                f"| {split} | {name} | {' × '.join(columns)} | {grid} | {q_actual:,.1f} | "
                f"{q_bound:,.1f} | {ratio:.2f} | {per_range:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
