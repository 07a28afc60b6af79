"""Issue 41 item 3: the range-count form's default grid reads public facts only.

The default grid is published in the release's manifest. It was chosen from the stored row count
whenever the relation was replace-one, also with a person column, where the row count is
private: the same 2,000 people with one person holding 1 or 501 rows got different grids. Now
it is chosen from the row count only when that count is public (replace-one, no person column),
else it is the schema's bins.
"""

import numpy as np
import pandas as pd
import pytest

from dpportal.releases.forms import ReleaseForm
from tests.helpers import make_dataset

pytestmark = pytest.mark.django_db

COLUMNS = [
    {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
    {"name": "hours", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
]


def people_table(tmp_path, rows_of_one_person: int):
    """2,000 people with one row each, then person "p-last" with `rows_of_one_person` rows."""
    rng = np.random.default_rng(4)
    ids = [f"p{i}" for i in range(1999)] + ["p-last"] * rows_of_one_person
    table = pd.DataFrame(
        {
            "pid": ids,
            "age": rng.integers(18, 90, len(ids)),
            "hours": rng.integers(0, 80, len(ids)),
        }
    )
    path = tmp_path / f"people-{rows_of_one_person}.csv"
    table.to_csv(path, index=False)
    return path


def default_grid(owner, path, *, person: bool) -> list[int]:
    first = {"name": "pid", "role": "person_id"} if person else {"name": "pid", "type": "ignored"}
    schema = {"columns": [first, *COLUMNS], **({"max_rows_per_person": 2} if person else {})}
    dataset = make_dataset(owner, schema=schema, path=path, delta_total="0.00001")
    form = ReleaseForm(
        {
            "mechanism": "range_count",
            "columns": ["age", "hours"],
            "epsilon": "1.5",  # where 2,000 and 2,500 rows chose 16 and 32 cells
            "delta": "0.000001",
            "range_workload": "boxes",
            "range_queries": "40",
            "range_grid": "",
            "range_method": "auto",
        },
        dataset=dataset,
    )
    assert form.is_valid(), form.errors
    return form.params()["grid"]


def test_the_default_grid_does_not_depend_on_one_persons_rows(owner, tmp_path):
    grids = [default_grid(owner, people_table(tmp_path, n), person=True) for n in (1, 501)]
    assert grids[0] == grids[1]
    assert grids[0] == [10, 10]  # the schema's bins: public


def test_without_a_person_column_the_public_row_count_still_chooses_it(owner, tmp_path):
    """Replace-one without a person column: n is public, the grid follows it (as before)."""
    grids = [default_grid(owner, people_table(tmp_path, n), person=False) for n in (1, 501)]
    assert grids[0] != grids[1]
