"""The custodian-only verdict on real releases of the Adult sample, at several ε.

Each row: one release (the mechanism's own run, secure source) of age, sex, income, race from
the 2,000-row Adult sample, graded by `dpportal.releases.verdict.assess` against that sample: the grade,
the release's average pair TVD, the sampling floor and the noisy one-way baseline.

    nice -n 10 .venv/bin/python benchmarks/verdict_grades.py
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
from dpportal.releases.kinds import synthetic_verdict as verdict  # noqa: E402

SCHEMA = mechanisms.Schema.from_dict(json.loads((ROOT / "demo/adult_schema.json").read_text()))
COLUMNS = ["age", "sex", "income", "race"]
DATA = pd.read_csv(ROOT / "tests/data/adult_sample.csv", dtype=str)[COLUMNS]
RUNS = [("perturbed_histogram", {}, eps) for eps in (0.01, 0.1, 1.0, 10.0)] + [
    ("mwem", {"rounds": 6}, eps) for eps in (0.001, 0.01, 0.1, 1.0, 10.0)
]


def main():
    print(f"{'mechanism':20} {'eps':>6} {'grade':>17} {'pair TVD':>9} {'floor':>7} {'baseline':>9}")
    for name, params, epsilon in RUNS:
        output = mechanisms.run_release(
            name, DATA, SCHEMA, columns=COLUMNS, params=params, epsilon=epsilon
        )
        result = verdict.assess(
            SCHEMA, COLUMNS, DATA, output.files, epsilon=epsilon, neighbouring="replace-one"
        )
        print(
            f"{name:20} {epsilon:>6g} {result['label']:>17} {result['tvd']:>9.3f} "
            f"{result['floor']:>7.3f} {result['baseline']:>9.3f}"
        )


if __name__ == "__main__":
    main()
