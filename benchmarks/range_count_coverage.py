"""Range counts: do the 95% intervals in answers.csv cover the true count of raw records?

Run:  .venv/bin/python benchmarks/range_count_coverage.py [--quick]

Data: the 3,376 US airports of vega_datasets' bundled `airports.csv` (latitude, longitude;
public, BSD-3 package data, not used elsewhere in this project). Public bounds from
geography, not from the data: latitude 5..75, longitude -180..150 (every US airport,
Guam and the Aleutians included).

For each grid and epsilon: 300 random boxes in original units, corners drawn uniformly in
the bounds and never on a grid edge; `range_count_release` (mechanism auto, replace-one,
delta 0) writes answers.csv; the true count is the number of raw records with
lo <= value < hi on both axes. Repeated over several noise seeds. Printed per row:
  coverage        share of (box, seed) pairs whose [ci_lower, ci_upper] holds the truth
  noise-only      the same for estimate ± 1.96 noise_sd (the interval that ignores
                  rounding): the broken twin the bounds exist to fix
  cov. >=500      both coverages again over the boxes holding >= 500 records only
  width / count   median interval width over boxes holding >= 500 records, and the
                  median count of those boxes
Done when (issue 15): coverage >= 90% and median width < half the median count.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.range_count.api import range_count_release  # noqa: E402
from mechanisms.release_request import MechanismInputs  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402

BOUNDS = {"latitude": (5.0, 75.0), "longitude": (-180.0, 150.0)}
BOXES = 300
LARGE = 500


def airports() -> pd.DataFrame:
    import vega_datasets

    path = Path(vega_datasets.__file__).parent / "_data" / "airports.csv"
    return pd.read_csv(path)[list(BOUNDS)]


def random_boxes(rng: np.random.Generator, m: int) -> list[dict]:
    """Corners uniform in the bounds, rounded to 4 decimals (off every grid edge used)."""
    lower = np.array([lo for lo, _ in BOUNDS.values()])
    span = np.array([hi - lo for lo, hi in BOUNDS.values()])
    corners = np.round(lower + rng.uniform(size=(m, 2, 2)) * span, 4) + 1e-5
    lo, hi = corners.min(axis=1), corners.max(axis=1)
    return [
        {"type": "box", "lo": a.tolist(), "hi": b.tolist()} for a, b in zip(lo, hi, strict=True)
    ]


def true_counts(frame: pd.DataFrame, boxes: list[dict]) -> np.ndarray:
    values = frame.to_numpy(float)
    return np.array([((values >= b["lo"]) & (values < b["hi"])).all(axis=1).sum() for b in boxes])


def schema() -> Schema:
    return Schema.from_dict(
        {
            "columns": [
                {"name": c, "type": "numeric", "lower": lo, "upper": hi, "bins": 10}
                for c, (lo, hi) in BOUNDS.items()
            ]
        }
    )


def run(frame, grid: int, epsilon: float, seeds: int) -> dict:
    boxes = random_boxes(np.random.default_rng(2026), BOXES)
    truth = true_counts(frame, boxes)
    covered, naive, widths, chosen = [], [], [], set()
    for seed in range(seeds):
        out = range_count_release(
            MechanismInputs(
                data=frame,
                schema=schema(),
                columns=list(BOUNDS),
                params={"grid": f"{grid}x{grid}", "workload": boxes, "mechanism": "auto"},
                epsilon=epsilon,
                delta=0.0,
                neighbouring="replace-one",
                rng=seeded_source(seed),
            )
        )
        chosen.add(out.manifest["parameters"]["chosen_mechanism"])
        answers = pd.read_csv(io.StringIO(out.files["answers.csv"].decode()))
        assert (answers["exact_region"] == "no").all(), "a box edge fell on the grid"
        low, high = answers["ci_lower"].to_numpy(), answers["ci_upper"].to_numpy()
        est, sd = answers["estimate"].to_numpy(), answers["noise_sd"].to_numpy()
        covered.append((low <= truth) & (truth <= high))
        naive.append(np.abs(est - truth) <= 1.96 * sd)
        widths.append((high - low)[truth >= LARGE])
    large = truth[truth >= LARGE]
    return {
        "grid": f"{grid}x{grid}",
        "epsilon": epsilon,
        "method": "/".join(sorted(chosen)),
        "coverage": float(np.mean(covered)),
        "noise-only": float(np.mean(naive)),
        "coverage large": float(np.mean([c[truth >= LARGE] for c in covered])),
        "noise-only large": float(np.mean([c[truth >= LARGE] for c in naive])),
        "large boxes": len(large),
        "median width": float(np.median(np.concatenate(widths))) if len(large) else float("nan"),
        "median count": float(np.median(large)) if len(large) else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one grid, one epsilon, 3 seeds")
    args = parser.parse_args()
    frame = airports()
    settings = (
        [(128, 1.0)] if args.quick else [(g, e) for e in (0.5, 1.0) for g in (32, 64, 128, 256)]
    )
    seeds = 3 if args.quick else 10
    print(f"airports: {len(frame)} records, {BOXES} random boxes, {seeds} noise seeds per row")
    header = (
        "grid",
        "epsilon",
        "method",
        "coverage",
        "noise-only",
        "cov. >=500",
        "n-only >=500",
        "large boxes",
        "median width",
        "median count",
        "width/count",
        "met",
    )
    print(" | ".join(f"{h:>12}" for h in header))
    for grid, epsilon in settings:
        r = run(frame, grid, epsilon, seeds)
        ratio = r["median width"] / r["median count"]
        met = r["coverage"] >= 0.90 and ratio < 0.5
        cells = [
            r["grid"],
            f"{epsilon:g}",
            r["method"],
            f"{r['coverage']:.1%}",
            f"{r['noise-only']:.1%}",
            f"{r['coverage large']:.1%}",
            f"{r['noise-only large']:.1%}",
            str(r["large boxes"]),
            f"{r['median width']:.0f}",
            f"{r['median count']:.0f}",
            f"{ratio:.2f}",
            "yes" if met else "no",
        ]
        print(" | ".join(f"{c:>12}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
