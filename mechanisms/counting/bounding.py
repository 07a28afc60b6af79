"""Person-level contribution bounding inside an engine: at most k rows per person, at random.

`BoundedTally` wraps any tally (`mechanisms.counting.tally`): the engine keeps, for each
person (the rows sharing a value of the person column), the k rows with the smallest key
sha256(secret | position), and computes the wrapped tally over the rows kept; only its aggregate
leaves the engine. The secret is 128 bits drawn from the secure source per release
(`persons.bounding_secret`), never stored or shown; the position names a row where it is stored
("file#row" for Parquet, the row's ctid in PostgreSQL), so every engine and the in-process
reference order a person's rows alike and keep the same rows. In SQL:
`ROW_NUMBER() OVER (PARTITION BY person ORDER BY sha256(secret | position)) <= k`.

Rows without a person ID (NULL, or NaN read as missing here) are left out on every engine: a
table that stays where it lives must never make a release fail (issue 41), and leaving out a
row whatever the others hold changes no person's rows but its own.

Privacy (what `persons.row_level_budget`'s group-privacy argument needs): (1) every person
keeps at most k rows, by construction; (2) which rows a person keeps depends on their own rows
and the secret only, and is a uniformly random k-subset of them: the keys of distinct positions
are independent uniform draws for a random secret (sha256 read as a random function of the
secret), so the ranks of a person's rows are a uniform random order whatever the other rows are
or where they stand. Two tables that differ in one person's rows then give kept tables that
differ in that person's at most k rows (add-remove) or 2k (replace one person), as in process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mechanisms.arrays import AnyArray
from mechanisms.counting.sql import Dialect
from mechanisms.counting.tally import Tally
from mechanisms.errors import MechanismError

POSITION = "__dp_portal_position__"  # the in-process reference's position column
PERSON_KINDS = ("integer", "text")  # person IDs every engine partitions alike
RANK = "dp_portal_rank"
PERSON_ID, KEY = "__dp_portal_person__", "__dp_portal_key__"  # the reference's working columns


def row_key(secret: str, position: str) -> str:
    """sha256(secret | position) as lowercase hex: the order of a person's rows."""
    return hashlib.sha256(f"{secret}|{position}".encode()).hexdigest()


def person_texts(ids: pd.Series) -> tuple[AnyArray, list[str]]:
    """Which rows have an ID (a mask), and their IDs as the persons' texts (str of each)."""
    has_id: AnyArray = ~ids.isna().to_numpy()
    return has_id, [str(v) for v in ids[has_id]]


@dataclass(frozen=True)
class BoundedTally:
    """`inner` over at most `k` rows per value of `person`, chosen by the secret keys."""

    inner: Tally
    person: str
    k: int
    secret: str
    whole = True  # needs every row of a person at once: not additive over chunks

    @property
    def columns(self) -> list[str]:
        return [*self.inner.columns, self.person]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.inner.shape)

    def keyed(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows with an ID, their ID as text in PERSON_ID and their key in KEY.

        IDs as text, so a whole number read as 3 from one batch and as "3" from another (a
        batch with gaps, `batch_frame`) is one person, as the SQL engines partition it.
        """
        has_id, texts = person_texts(frame[self.person])
        present = frame[has_id].drop(columns=[self.person])
        return present.assign(
            **{
                PERSON_ID: texts,
                KEY: [row_key(self.secret, str(p)) for p in present[POSITION]],
            }
        )

    def of_frame(self, frame: pd.DataFrame) -> AnyArray:
        """The reference: the whole table, with its rows' positions in POSITION."""
        ordered = self.keyed(frame).sort_values(KEY, kind="stable")
        rank = ordered.groupby(PERSON_ID, sort=False).cumcount().to_numpy()
        kept = ordered[rank < self.k].drop(columns=[KEY, POSITION, PERSON_ID])
        return self.inner.of_frame(kept.reset_index(drop=True))

    def query(self, dialect: Dialect, kinds: dict[str, str], table: str) -> str:
        if dialect.position is None or dialect.digest is None:
            raise MechanismError(f"the {dialect.name} engine cannot bound rows per person")
        if kinds[self.person] not in PERSON_KINDS:
            raise MechanismError(
                f"the person column ({self.person!r}) is stored as {kinds[self.person]}; the "
                f"{dialect.name} engine bounds rows per person by whole-number or text IDs"
            )
        person = dialect.identifier(self.person)
        # a row count reads no column: keep one constant so each SELECT names something
        needed = ", ".join(dialect.identifier(c) for c in self.inner.columns) or "1 AS dp_one"
        key = dialect.digest(f"{dialect.text(self.secret + '|')} || {dialect.position}")
        window = f"PARTITION BY {person_key(dialect, person, kinds[self.person])} ORDER BY {key}"
        ranked = (
            f"SELECT {needed}, ROW_NUMBER() OVER ({window}) AS {RANK} "  # noqa: S608  # nosec B608: quoted
            f"FROM {table} WHERE {person} IS NOT NULL"
        )
        names = ", ".join(dialect.identifier(c) for c in self.inner.columns) or "dp_one"
        kept = f"(SELECT {names} FROM ({ranked}) AS ranked WHERE {RANK} <= {int(self.k)}) AS kept"  # noqa: S608  # nosec B608
        return self.inner.query(dialect, kinds, kept)

    def from_rows(self, rows: list[tuple[Any, ...]]) -> AnyArray:
        return self.inner.from_rows(rows)

    def settled(self, answer: AnyArray) -> AnyArray:
        return self.inner.settled(answer)


def person_key(dialect: Dialect, person: str, kind: str) -> str:
    """The person column as the engine partitions its rows by it.

    A text is compared code point by code point whatever its column's collation
    (`Dialect.bytewise`), as pandas groups the IDs.
    """
    return dialect.bytewise(person) if kind == "text" else person


def whole(tally: Any) -> bool:
    """Whether `tally` needs the whole table at once (person-level bounding)."""
    return bool(getattr(tally, "whole", False))


def positioned(frames: Any, tally: Any) -> pd.DataFrame:
    """All chunks as one frame (they carry POSITION), for a tally that needs the whole table."""
    parts = list(frames)
    if not parts:
        return pd.DataFrame({c: np.array([], dtype=object) for c in [*tally.columns, POSITION]})
    combined: pd.DataFrame = pd.concat(parts, ignore_index=True)
    return combined
