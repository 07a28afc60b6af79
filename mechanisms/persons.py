"""Person-level privacy: the person column, contribution bounding, and the row-level budget.

When one person can appear in several rows (a patient's visits, a panel's waves), the schema
names the column that identifies them and a public bound k on rows per person::

    {"columns": [{"name": "patient", "role": "person_id"}, ...], "max_rows_per_person": 3}

The person column needs no type, bounds or categories, and it is never released: no mechanism
sees it. A release may override k (`run_release(max_rows_per_person=...)`, the command line's
`--max-rows-per-person`). Without a person column each row is one person (row-level privacy).

The unit of privacy is then one person: all rows with the same ID, at most k of them kept.
The neighbouring relations, in persons: add-remove (the default here: add or remove all rows
of one person; the number of people and of rows is private) or replace-one (replace all rows
of one person by at most k rows of another; the number of people is public, the number of
rows is not).

Contribution bounding (`bound_contributions`) keeps, for every person with more than k rows,
k of them chosen uniformly at random (a shuffle by the random source, then the first k rows of
each person), before any mechanism sees the data. Every person then contributes at most k
rows, chosen from their own rows only. A table that stays where it lives is bounded inside its
engine instead (`mechanisms.counting.bounding`: the k rows of smallest sha256(secret | position),
the secret from `bounding_secret`), which keeps the same two properties.

Sensitivity, by group privacy over the bounded table (`row_level_budget`): a change of one
person is at most g = k row additions or removals (add-remove) or g = 2k (replace-one: remove
k, add k). A mechanism that is epsilon_row-DP under add/remove of one row is g * epsilon_row-DP
for g rows, so it runs at epsilon_row = epsilon / g under row-level add-remove. For the count
mechanisms this is exactly the sensitivity scaling the issue asks for: histogram and marginal
counts move by at most k in L1 (add-remove of a person) or 2k (replace), so their noise scale
becomes k / epsilon or 2k / epsilon; MWEM's exponential-mechanism scores (each query answer
moves by at most k, or 2k) and its Laplace measurements are scaled alike. For rho-zCDP (range
counts with delta > 0) a group of g rows costs g^2 rho (Bun and Steinke 2016, Prop. 27), i.e.
the L2 sensitivity of the counts is taken as k (all k rows in one cell: the true worst case,
since bounding does not spread a person over distinct cells), and the mechanism runs at
rho / g^2. Mechanisms whose guarantee needs a public row count (the smoothed histogram) or whose
(epsilon, delta) composition has no exact group form (mn12_laplace with delta > 0) are refused
at person level (`check_person_level`) rather than run at row level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.accounting import approx_dp_to_zcdp, float_at_most, zcdp_to_approx_dp
from mechanisms.errors import MechanismError, shown
from mechanisms.noise import RandomSource

PERSON_ROLE = "person_id"
MAX_ROWS_LIMIT = 10_000
REFUSED = {
    "smoothed_histogram": "its guarantee needs the number of rows to be public, which it is "
    "not at person level; use perturbed_histogram or mwem",
}


@dataclass(frozen=True)
class PersonLevel:
    """The schema's person column and its public bound k on rows per person."""

    column: str
    max_rows: int
    position: int = field(default=0, compare=False)  # where the column stands in the schema

    def unit(self) -> str:
        """The unit of privacy, in the words every manifest and page uses."""
        return (
            f"one person: all rows with the same {self.column}, at most {self.max_rows} rows each"
        )

    def group_size(self, neighbouring: str) -> int:
        """Rows one neighbouring step changes: k (add-remove a person) or 2k (replace one)."""
        return self.max_rows if neighbouring == "add-remove" else 2 * self.max_rows


def check_max_rows(value: Any, where: str = "max_rows_per_person") -> int:
    """k as an int in [1, MAX_ROWS_LIMIT], else a MechanismError saying how to fix it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROWS_LIMIT:
        raise MechanismError(
            f"{where} ({shown(value)}) must be a whole number from 1 to {MAX_ROWS_LIMIT}: the most "
            "rows one person may contribute (rows beyond it are dropped at random)"
        )
    return value


def split_schema(document: dict[str, Any]) -> tuple[list[Any], PersonLevel | None]:
    """The schema document's ordinary column entries, and its person level (or None).

    At most one column has "role": "person_id"; "max_rows_per_person" is required with it and
    meaningless without it.
    """
    entries = list(document.get("columns") or [])
    people = [c for c in entries if isinstance(c, dict) and c.get("role") == PERSON_ROLE]
    bound = document.get("max_rows_per_person")
    if len(people) > 1:
        names = [c.get("name") for c in people]
        raise MechanismError(f"schema marks several person columns {shown(names)}; keep only one")
    if not people:
        if bound is not None:
            raise MechanismError(
                "schema sets max_rows_per_person but no column has "
                f'"role": "{PERSON_ROLE}"; name the column that identifies a person'
            )
        return entries, None
    name = people[0].get("name")
    if not isinstance(name, str) or not name:
        raise MechanismError(f'the person column ({shown(people[0])}) needs a non-empty "name"')
    if bound is None:
        raise MechanismError(
            f"schema names the person column {name!r} but not max_rows_per_person; set the "
            'most rows one person may contribute beside "columns" (for example '
            '"max_rows_per_person": 5; 1, 2, 5 or 10 are usual)'
        )
    person = PersonLevel(name, check_max_rows(bound), entries.index(people[0]))
    return [c for c in entries if c is not people[0]], person


def schema_entries(person: PersonLevel) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON form of the person level: its column entry and the top-level keys."""
    return {"name": person.column, "role": PERSON_ROLE}, {"max_rows_per_person": person.max_rows}


def for_release(person: PersonLevel | None, max_rows: int | None) -> PersonLevel | None:
    """The person level of one release: the schema's, with k overridden when `max_rows` is set."""
    if max_rows is None:
        return person
    if person is None:
        raise MechanismError(
            "max_rows_per_person is set but the schema has no person column; mark the column "
            f'that identifies a person with "role": "{PERSON_ROLE}"'
        )
    return PersonLevel(person.column, check_max_rows(max_rows), person.position)


def check_person_level(mechanism: str, delta: float, params: dict[str, Any]) -> None:
    """Refuse, with the reason, a mechanism that cannot be released at person level."""
    reason = REFUSED.get(mechanism)
    if mechanism == "range_count" and params.get("mechanism") == "mn12_laplace" and delta > 0:
        reason = (
            "its (epsilon, delta) composition has no exact person-level form; choose "
            "identity, tree or path_tree (zCDP) instead"
        )
    if reason:
        raise MechanismError(
            f"{mechanism} cannot protect persons (one person, many rows): {reason}"
        )


def bound_contributions(
    data: pd.DataFrame, person: PersonLevel, rng: RandomSource
) -> tuple[pd.DataFrame, int]:
    """The rows kept (at most k per person, at random) without the ID column; rows dropped.

    Each person with more than k rows keeps k of them, a uniformly random subset. The number
    of rows dropped is custodian-only: it reveals rows per person.

    A missing ID is refused: it would make an unbounded "person" of all the missing rows.
    Which rows a person keeps depends on their own rows and the randomness only.
    """
    if person.column not in data.columns:
        raise MechanismError(
            f"the person column ({person.column!r}) is not in the data; check the schema's "
            f'"role": "{PERSON_ROLE}" column name'
        )
    ids = data[person.column]
    if ids.isna().any():
        raise MechanismError(
            f"the person column ({person.column!r}) has empty cells; every row needs its "
            "person's ID (remove those rows or fill in the IDs)"
        )
    order = np.arange(len(data))
    rng.shuffle(order)
    shuffled = ids.iloc[order].reset_index(drop=True)
    keep = np.sort(
        order[shuffled.groupby(shuffled, sort=False).cumcount().to_numpy() < person.max_rows]
    )
    kept = data.iloc[keep].drop(columns=[person.column])
    return kept.reset_index(drop=True), len(data) - len(keep)


def bounding_secret(rng: RandomSource) -> str:
    """128 random bits as hex from `rng` (the secure source in releases).

    The secret of the keys that choose each person's rows when they are bounded inside an engine
    (`mechanisms.counting.bounding`). Drawn per release, never stored or shown.
    """
    return "".join(f"{int(v):08x}" for v in rng.integers(2**32, 4))


def mechanism_budget(
    person: PersonLevel | None, epsilon: float, delta: float, neighbouring: str
) -> tuple[float, float, str]:
    """(epsilon, delta, neighbouring) a mechanism (or its accuracy preview) runs at.

    Row level: the request itself. Person level: `row_level_budget` for the person's group
    of rows, under row-level add-remove.
    """
    if person is None:
        return epsilon, delta, neighbouring
    group = person.group_size(neighbouring)
    return (*row_level_budget(epsilon, delta, group), "add-remove")


def rows_over_bound(ids: pd.Series[Any], max_rows: int) -> int:
    """Rows bounding drops: the sum over persons of (rows - k) where positive.

    Custodian-only (it is computed from the raw rows per person and is not private); it does
    not depend on which rows were chosen, so the owner's page can recompute it from the data.
    """
    per_person = ids.value_counts().to_numpy()
    return int(np.maximum(per_person - max_rows, 0).sum())


def row_level_budget(epsilon: float, delta: float, group: int) -> tuple[float, float]:
    """(epsilon_row, delta) for a row-level add-remove run, so `group` rows cost (epsilon, delta).

    See the module docstring for the group-privacy argument.

    delta = 0: epsilon_row = epsilon / group (pure DP, group privacy), rounded down.
    delta > 0: the requested (epsilon, delta) is read as rho-zCDP with the largest rho meeting
    it (as the range counts do); epsilon_row is the largest float whose rho is at most
    rho / group^2, so group^2 * rho_row <= rho.
    """
    if math.isinf(epsilon):
        return epsilon, delta
    if delta == 0:
        return float_at_most(Fraction(epsilon) / group), 0.0
    target = approx_dp_to_zcdp(epsilon, delta) / group**2
    row_epsilon = zcdp_to_approx_dp(target, delta)
    while approx_dp_to_zcdp(row_epsilon, delta) > target:
        row_epsilon = math.nextafter(row_epsilon, 0.0)
    return row_epsilon, delta


def approx_group_budget(epsilon: float, delta: float, group: int) -> tuple[float, float]:
    """(epsilon_row, delta_row) so that `group` rows cost at most (epsilon, delta).

    For an (epsilon, delta)-DP mechanism that is not zCDP, such as the thresholded category
    discovery.

    Group privacy of approximate DP (by induction over the g rows): an (e, d)-DP mechanism under
    add/remove of one row is (g e, d (1 + e^e + ... + e^((g - 1) e)))-DP for g rows. Here
    epsilon_row = epsilon / g rounded down (`row_level_budget`), and delta_row = delta divided by
    that sum, then lowered by a relative 1e-9 to cover the float error of the sum.
    """
    row_epsilon = row_level_budget(epsilon, 0.0, group)[0]
    growth = math.fsum(math.exp(i * row_epsilon) for i in range(group))
    return row_epsilon, delta / growth * (1 - 1e-9)
