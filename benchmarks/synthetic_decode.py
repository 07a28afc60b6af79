"""Time to decode synthetic rows (cell codes to the synthetic table), as MWEM and the
histograms do before writing synthetic.csv, against the decoding of before (issue 44 item 6).

    python benchmarks/synthetic_decode.py [--repeat R] [ROWS ...]   (default 100000 1000000)

Made-up codes, no data set needed: 3 numeric, 4 categorical (four categories, "(other)" and
"(missing)") and 1 date column. For each size, CPU seconds of `Schema.decode` (MWEM's path)
and `Schema.decode_cells` (the histograms' path, flat cell indices) now, and of the same
decoding as it was before (`decode_before`: every label and date a Python string, which
pandas then turned into its text type; both paths decoded so before), the ratios now / before, and whether the two tables
write the same CSV (`mechanisms.release.csv_bytes`). Least time of R runs each (default 3),
the two taking turns, in the same process.
"""

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.release import csv_bytes  # noqa: E402
from mechanisms.schema import CategoricalColumn, NumericColumn, Schema  # noqa: E402

CATEGORIES = ["north", "south", "east", "west"]
SCHEMA = Schema.from_dict(
    {
        "columns": [
            *(
                {"name": f"x{k}", "type": "numeric", "lower": 0, "upper": 100, "bins": 4}
                for k in range(3)
            ),
            *(
                {
                    "name": f"c{k}",
                    "type": "categorical",
                    "categories": CATEGORIES,
                    "unknown": "other",
                }
                for k in range(4)
            ),
            {
                "name": "day",
                "type": "date",
                "part": "date",
                "lower": "2010-01-01",
                "upper": "2019-12-31",
                "bins": 10,
            },
        ]
    }
)
COLUMNS = SCHEMA.resolve_columns(None)
EPOCH = np.datetime64("1970-01-01", "D")


def decode_before(codes: np.ndarray, seed: int) -> pd.DataFrame:
    """`Schema.decode` as it was: labels taken from an object array, dates as NumPy text."""
    rng = seeded_source(seed)
    out = {}
    for j, name in enumerate(COLUMNS):
        spec = SCHEMA.column(name)
        if isinstance(spec, CategoricalColumn):
            labels: list[str | None] = list(spec.labels())
            labels[-1] = None
            out[name] = np.asarray(labels, dtype=object)[codes[:, j]]
            continue
        assert isinstance(spec, NumericColumn)
        values = spec.decode(codes[:, j], rng)
        if spec.part == "date":
            text = np.full(len(values), None, dtype=object)
            present = ~np.isnan(values)
            text[present] = np.datetime_as_string(EPOCH + values[present].astype(np.int64))
            out[name] = text
        else:
            out[name] = spec.output(values)
    return pd.DataFrame(out)


def decode_now(decode, codes):
    """`decode` (Schema.decode or decode_cells) with a fresh source of the same seed."""
    return decode(codes, COLUMNS, seeded_source(1))


def least(step, repeat):
    best, made = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        made = step()
        best = min(best, time.process_time() - start)
    return best, made


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    shape = SCHEMA.domain_shape(COLUMNS)
    print(
        f"{'rows':>10} {'decode s':>9} {'before s':>9} {'ratio':>6} {'cells s':>8} "
        f"{'ratio':>6} {'same CSV':>8}"
    )
    for rows in args.rows or [100_000, 1_000_000]:
        rng = np.random.default_rng(rows)
        codes = np.stack([rng.integers(0, k, rows) for k in shape], axis=1)
        flat = np.ravel_multi_index(tuple(codes.T), shape)
        t_now, now = least(partial(decode_now, SCHEMA.decode, codes), args.repeat)
        t_before, before = least(partial(decode_before, codes, 1), args.repeat)
        t_cells, cells = least(partial(decode_now, SCHEMA.decode_cells, flat), args.repeat)
        same = csv_bytes(now) == csv_bytes(before) == csv_bytes(cells)
        print(
            f"{rows:>10,} {t_now:>9.3f} {t_before:>9.3f} {t_now / t_before:>6.2f} "
            f"{t_cells:>8.3f} {t_cells / t_before:>6.2f} {'yes' if same else 'NO':>8}"
        )


if __name__ == "__main__":
    main()
