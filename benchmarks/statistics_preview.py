"""The statistics preview by group size, and the groups withheld, against real releases.

Issue 43: "The preview assumes average-size groups: in small groups the real 95th-percentile
error was up to 9.1× the preview", and groups the data does not hold ("(other)") were published
at the middle of the range. On the 2,000-row Adult sample (tests/data/adult_sample.csv, the
demo's public schema), grouped by race (five declared categories and "(other)", which the data
does not hold), mean and median of age and of hours per week at ε = 0.5 under add/remove, R
seeded releases are drawn by the release's own code, and per statistic and group it prints:

- `rows`: the group's true size (the benchmark reads the data; nothing here is published);
- `published`: the share of releases in which the group got an estimate (`support`'s rule;
  before issue 43 every group got one in every release, "(other)" at the range's middle);
- for means, `p95_err`: the 95th percentile of |estimate − true mean| over the releases that
  published the group, against the preview's 95% half-width for a group of the average size
  (`avg_preview`, what the preview said before) and for a group of its own size (`own_preview`,
  what its table by group size says now), and their ratios.

    nice -n 10 .venv/bin/python benchmarks/statistics_preview.py [--releases R] [--epsilon E]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mechanisms.catalogue import run_release  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402
from mechanisms.statistics import statistics_plan  # noqa: E402

COLUMNS = ["age", "hours-per-week", "race"]
STATS = ["mean:age", "median:age", "mean:hours-per-week", "median:hours-per-week"]


def releases(table, schema, epsilon, count):
    """`count` seeded releases' statistics tables (seeds 0..count-1)."""
    out = []
    for seed in range(count):
        result = run_release(
            "statistics", table, schema, epsilon=epsilon, neighbouring="add-remove",
            columns=COLUMNS, params={"stat": STATS, "by": ["race"]}, rng=seeded_source(seed),
        )  # fmt: skip
        out.append(pd.read_csv(io.BytesIO(result.files["statistics.csv"])))
    return out


def truths(table, schema) -> dict[tuple[str, str, str], tuple[int, float]]:
    """(rows, true value of the clamped values) per (statistic, column, group)."""
    found = {}
    for label in schema.axis_labels("race"):
        rows = table[table["race"] == label] if label != "(other)" else table.iloc[:0]
        for column in ("age", "hours-per-week"):
            spec = schema.column(column)
            values = rows[column].clip(spec.lower, spec.upper)
            mean = float(values.mean()) if len(values) else float("nan")
            found[("mean", column, label)] = (len(rows), mean)
            found[("median", column, label)] = (len(rows), float("nan"))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", type=int, default=200)
    parser.add_argument("--epsilon", type=float, default=0.5)
    args = parser.parse_args()
    table = pd.read_csv(ROOT / "tests" / "data" / "adult_sample.csv")
    schema = Schema.from_dict(json.loads((ROOT / "demo" / "adult_schema.json").read_text()))
    plan = statistics_plan(
        schema, COLUMNS, {"stat": STATS, "by": ["race"]}, epsilon=args.epsilon, delta=0.0,
        neighbouring="add-remove", n=len(table),
    )  # fmt: skip
    previews = {(p["statistic"], p["column"]): p for p in plan.details["statistics"]}
    now = releases(table, schema, args.epsilon, args.releases)
    print(
        f"{args.releases} releases, ε = {args.epsilon}, add/remove, {len(table):,} rows, "
        f"{plan.details['groups']} groups (average {plan.details['group_rows']:.0f} rows)"
    )
    header = ("statistic", "group", "rows", "published", "p95_err", "avg_preview",
              "ratio_avg", "own_preview", "ratio_own")  # fmt: skip
    print(" ".join(f"{h:>22}" if i < 2 else f"{h:>11}" for i, h in enumerate(header)))
    for (stat, column, label), (rows, true) in truths(table, schema).items():
        mask = [(t["statistic"] == stat) & (t["column"] == column) & (t["race"] == label)
                for t in now]  # fmt: skip
        estimates = np.array(
            [float(t[m]["estimate"].iloc[0]) for t, m in zip(now, mask, strict=True)]
        )
        shown = estimates[~np.isnan(estimates)]
        row = [f"{stat} of {column}", label, f"{rows:,}", f"{len(shown) / len(now):.3f}"]
        preview = previews[(stat, column)]
        if stat == "mean" and len(shown) and rows:
            error = float(np.quantile(np.abs(shown - true), 0.95))
            average = float(preview["halfwidth"])
            own = average * float(preview["size"]) / rows
            row += [f"{error:.3g}", f"{average:.3g}", f"{error / average:.2f}", f"{own:.3g}",
                    f"{error / own:.2f}"]  # fmt: skip
        else:
            row += ["-"] * 5
        print(" ".join(f"{v:>22}" if i < 2 else f"{v:>11}" for i, v in enumerate(row)))


if __name__ == "__main__":
    main()
