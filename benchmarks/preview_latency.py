"""Accuracy preview latency: the worst settings the new-release form accepts, per mechanism.

Run:  .venv/bin/python benchmarks/preview_latency.py [--before FILE] [--save FILE] [--only NAME]

Each row times one call of the mechanism's public plan (`MechanismSpec.plan`, what
`dpportal.releases.engine.expected_accuracy` runs for the form's accuracy preview), on the demo
schema (with fnlwgt made numeric, for 3-D ranges) at the largest settings the form accepts:
grids up to 65,536 points, 2,000 random ranges, the widest domain under 10^8 cells. Target:
every row under 1 s on this 2-core machine. `--save` writes the seconds as JSON; `--before`
reads such a file to print the ratio. benchmarks/preview_latency_before.json holds the figures
of the code before the preview bounds (issue 13, item 8); its 2-D
prefixes row was stopped after 900 s, and its 3-D row used the columns age, hours-per-week,
age. A setting that raises MechanismError is shown as "refused".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mechanisms  # noqa: E402
from mechanisms.errors import MechanismError  # noqa: E402
from mechanisms.workload import marginals_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "demo" / "adult_schema.json").read_text())
for _column in SCHEMA["columns"]:  # a third numeric column, for 3-D range counts
    if _column["name"] == "fnlwgt":
        _column.update(type="numeric", lower=0, upper=1_500_000, bins=10)
ROWS = 48_842
ALL = [c["name"] for c in SCHEMA["columns"] if c["type"] != "ignored"]
WIDEST = ALL[:8]  # 61,689,600 cells: the most columns the domain limit (10^8 cells) allows


TWO = ["age", "hours-per-week"]


def ranges(label, columns, grid, workload, method="auto", delta=0.0):
    """A range-count row: 2,000 random ranges (or every prefix), epsilon 1."""
    params = {"grid": grid, "mechanism": method}
    if workload == "prefixes":
        params["prefixes"] = True
    else:
        params[f"random_{workload}"] = 2000
    return (label, "range_count", columns, params, 1.0, delta)


# (label, mechanism, columns, params, epsilon, delta)
SETTINGS = [
    ranges(
        "range 2 cols 256x256, 2000 halfspaces, auto, δ>0",
        TWO,
        [256, 256],
        "halfspaces",
        delta=1e-6,
    ),
    ranges("range 2 cols 256x256, 2000 halfspaces, auto, δ=0", TWO, [256, 256], "halfspaces"),
    ranges(
        "range 2 cols 256x256, 2000 halfspaces, mn12", TWO, [256, 256], "halfspaces", "mn12", 1e-6
    ),
    ranges(
        "range 2 cols 256x256, 2000 halfspaces, path_tree",
        TWO,
        [256, 256],
        "halfspaces",
        "path_tree",
        1e-6,
    ),
    ranges("range 2 cols 256x256, 2000 boxes, auto", TWO, [256, 256], "boxes"),
    ranges("range 2 cols 256x256, prefixes (form refuses)", TWO, [256, 256], "prefixes"),
    ranges("range 1 col 4096, prefixes, auto", ["age"], [4096], "prefixes"),
    ranges("range 1 col 4096, 2000 boxes, per_query", ["age"], [4096], "boxes", "per_query"),
    ranges(
        "range 3 cols 40x40x40, 2000 halfspaces, auto, δ>0",
        ["age", "fnlwgt", "hours-per-week"],
        [40, 40, 40],
        "halfspaces",
        delta=1e-6,
    ),
    (
        "mwem 8 columns, triples, 200 rounds",
        "mwem",
        WIDEST,
        {"workload": marginals_spec(3), "rounds": 200},
        1.0,
        0.0,
    ),
    (
        "mwem 8 columns, pairs, auto rounds",
        "mwem",
        WIDEST,
        {"workload": marginals_spec(2)},
        1.0,
        0.0,
    ),
    ("noisy histogram, 8 columns", "perturbed_histogram", WIDEST, {}, 1.0, 0.0),
    ("smoothed histogram, 8 columns", "smoothed_histogram", WIDEST, {}, 1.0, 0.0),
]


def time_plan(mechanism, columns, params, epsilon, delta) -> float | None:
    schema = mechanisms.Schema.from_dict(SCHEMA)
    started = time.perf_counter()
    try:
        mechanisms.catalogue.spec(mechanism).plan(
            mechanisms.PlanInputs(
                schema=schema,
                columns=columns,
                params=params,
                epsilon=epsilon,
                delta=delta,
                neighbouring="replace-one",
                n=ROWS,
            )
        )
    except MechanismError:
        return None
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="JSON of seconds from the code before")
    parser.add_argument("--save", type=Path, help="write this run's seconds as JSON")
    parser.add_argument("--only", help="run only settings whose label contains this")
    args = parser.parse_args()
    before = json.loads(args.before.read_text()) if args.before else {}
    now = {}
    print(f"{'setting':52} {'before s':>9} {'now s':>9} {'ratio':>7}")
    for label, mechanism, columns, params, epsilon, delta in SETTINGS:
        if args.only and args.only not in label:
            continue
        seconds = time_plan(mechanism, columns, params, epsilon, delta)
        now[label] = seconds
        old = before.get(label)
        shown = "refused" if seconds is None else f"{seconds:.3f}"
        old_shown = "-" if old is None else f"{old:.3f}"
        ratio = f"{old / seconds:.0f}x" if old and seconds else "-"
        print(f"{label:52} {old_shown:>9} {shown:>9} {ratio:>7}", flush=True)
        if args.save:
            args.save.write_text(json.dumps(now, indent=1))


if __name__ == "__main__":
    main()
