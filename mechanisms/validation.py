"""Checks of a whole input table against its schema, before any noise is drawn.

`check_data` finds every value that would make a release fail or be silently mis-binned once it
has started: a missing, non-numeric, NaN or infinite value in a numeric column, and a value
outside the declared categories of a categorical column whose "unknown" is "reject". The
command line refuses such a file before the mechanism runs; the portal can call the same
function when the custodian confirms the schema.

Privacy: the messages describe the raw data (counts and row numbers of bad values); they are
for the custodian only and must never appear in a public artifact.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechanisms.schema import CategoricalColumn, Schema


def check_data(data: pd.DataFrame, schema: Schema, columns) -> list[str]:
    """One message per column of `columns` whose values the schema cannot take; [] if none.

    Rows are numbered 1-based among the data rows (row 1 is the line after the CSV header).
    """
    messages = []
    for name in columns:
        spec = schema.column(name)
        if name not in data.columns:
            messages.append(f"column {name!r} is declared in the schema but not in the file")
            continue
        values = data[name]
        if isinstance(spec, CategoricalColumn):
            if spec.unknown != "reject":
                continue
            text = values.astype("string")
            bad = (~text.isin(list(spec.categories))).fillna(True).to_numpy(bool)
            problem, fix = (
                "values outside its declared categories",
                'add them to the schema or set "unknown": "other"',
            )
        else:
            numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
            bad = ~np.isfinite(numbers)
            problem, fix = (
                "missing, non-numeric or infinite values",
                "clean the file or mark the column ignored",
            )
        if bad.any():
            messages.append(
                f"column {name!r} has {int(bad.sum())} {problem} (first at "
                f"row {int(np.argmax(bad)) + 1}); {fix}"
            )
    return messages
