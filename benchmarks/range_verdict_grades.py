"""The custodian-only verdict on range-count releases of real tables, at several ε.

Each row: one range-count release (the mechanism's own run, secure source) graded by
`dpportal.releases.kinds.range_count.verdict.assess` against the raw table: the grade, the RMSE of the answers on
the release's own ranges, the sampling floor, the trivial baseline at the same ε and the share
of 95% intervals holding the true count. Tables: the 2,000-row Adult sample (age ×
hours-per-week, and age alone) and vega_datasets' airports (3,376 US airports, latitude ×
longitude within the whole globe's bounds).

    nice -n 10 .venv/bin/python benchmarks/range_verdict_grades.py
"""

import json
import os
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
import django  # noqa: E402

django.setup()
import mechanisms  # noqa: E402
from dpportal.releases.kinds.range_count import verdict as range_verdict  # noqa: E402

ADULT = mechanisms.Schema.from_dict(json.loads((ROOT / "demo/adult_schema.json").read_text()))
AIRPORTS = mechanisms.Schema.from_dict(
    {
        "columns": [
            {"name": "latitude", "type": "numeric", "lower": -90, "upper": 90, "bins": 18},
            {"name": "longitude", "type": "numeric", "lower": -180, "upper": 180, "bins": 36},
        ]
    }
)
EPSILONS = (0.01, 0.1, 1.0, 10.0)


def tables():
    from vega_datasets import local_data

    adult = pd.read_csv(ROOT / "tests/data/adult_sample.csv", dtype=str)
    airports = local_data.airports()[["latitude", "longitude"]].astype(str)
    boxes = {"random_boxes": 100, "mechanism": "auto"}
    return [
        ("adult age×hours 16×16", adult, ADULT, ["age", "hours-per-week"], {"grid": [16, 16]}),
        ("adult age 64", adult, ADULT, ["age"], {"grid": [64]}),
        (
            "airports lat×long 64×64",
            airports,
            AIRPORTS,
            ["latitude", "longitude"],
            {"grid": [64, 64]},
        ),
        (
            "airports lat×long 16×16",
            airports,
            AIRPORTS,
            ["latitude", "longitude"],
            {"grid": [16, 16]},
        ),
    ], boxes


def main():
    runs, boxes = tables()
    print(
        f"{'table':26} {'eps':>5} {'method':>9} {'grade':>17} {'RMSE':>8} {'floor':>7} "
        f"{'baseline':>9} {'coverage':>8}"
    )
    for name, data, schema, columns, params in runs:
        for epsilon in EPSILONS:
            output = mechanisms.run_release(
                "range_count",
                data[columns],
                schema,
                columns=columns,
                params={**boxes, **params},
                epsilon=epsilon,
            )
            result = range_verdict.assess(
                schema,
                columns,
                data[columns],
                output.files,
                epsilon=epsilon,
                neighbouring="replace-one",
            )
            method = output.manifest["parameters"]["chosen_mechanism"]
            print(
                f"{name:26} {epsilon:>5g} {method:>9} {result['label']:>17} {result['rmse']:>8.1f} "
                f"{result['floor']:>7.1f} {result['baseline']:>9.1f} {result['coverage']:>8.0%}"
            )


if __name__ == "__main__":
    main()
