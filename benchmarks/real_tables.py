"""Issue 14 on public tables: missing shares, whole numbers and months in synthetic tables.

For each table of tests/real_tables.py (cars, la-riots, seattle-weather from vega_datasets; co2
from statsmodels) and each synthetic-data mechanism at epsilon = 1 (secure noise), prints per
released column: the true share of missing values, the synthetic one, the share of synthetic
values that are whole numbers (whole-number columns), and the number of cells.

    .venv/bin/python benchmarks/real_tables.py
"""

import io
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms import Schema  # noqa: E402
from mechanisms.catalogue import run_release  # noqa: E402
from tests.real_tables import TABLES  # noqa: E402

COLUMNS = {
    "cars": ["Miles_per_Gallon", "Horsepower", "Cylinders", "Year"],
    "la_riots": ["age", "gender", "death_date"],
    "seattle_weather": ["date", "weather"],
    "co2": ["week", "co2"],
}
RUNS = {
    "perturbed_histogram": {},
    "smoothed_histogram": {"rows": 50},
    "mwem": {"workload": {"queries": [{"type": "marginals", "k": 1}]}},
}


def main() -> None:
    print(
        f"{'table':16} {'mechanism':20} {'column':17} {'cells':>5} {'missing':>8} "
        f"{'synthetic':>9} {'whole':>6}"
    )
    for table, build in TABLES.items():
        content, declared = build()
        schema = Schema.from_dict(declared)
        raw = pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False)
        for mechanism, params in RUNS.items():
            out = run_release(
                mechanism, raw, schema, columns=COLUMNS[table], epsilon=1.0, params=params
            )
            synthetic = pd.read_csv(
                io.BytesIO(out.files["synthetic.csv"]), dtype=str, keep_default_na=False
            )
            for name in COLUMNS[table]:
                spec = schema.column(name)
                present = synthetic[name][synthetic[name] != ""]
                whole = (
                    f"{present.str.fullmatch(r'-?[0-9]+').mean():6.3f}"
                    if getattr(spec, "integer", False) and spec.part != "date"
                    else "     -"
                )
                print(
                    f"{table:16} {mechanism:20} {name:17} {spec.n_cells:5d} "
                    f"{(raw[name] == '').mean():8.4f} {(synthetic[name] == '').mean():9.4f} {whole}"
                )


if __name__ == "__main__":
    main()
