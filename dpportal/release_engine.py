"""Worker side of a release: read the stored table and run the requested mechanism on it.

The only bridge between the portal and the `mechanisms` package.
"""

from pathlib import Path

import pandas as pd
from django.conf import settings

import mechanisms


class ReleaseInputError(Exception):
    """The release cannot run on this input; the message is shown to the custodian."""


def dataset_path(dataset) -> Path:
    return Path(settings.DATASET_STORAGE_DIR) / dataset.storage_name


def load_columns(dataset, columns) -> pd.DataFrame:
    """Read only the requested columns of the stored raw table."""
    path = dataset_path(dataset)
    if not dataset.storage_name or not path.exists():
        raise ReleaseInputError("The dataset's file is no longer stored, so it cannot be read.")
    return pd.read_csv(path, usecols=list(columns), dtype=str, keep_default_na=False)


def compute(release, progress):
    """Run the release's mechanism and return its `mechanisms.ReleaseOutput` (public files)."""
    dataset = release.dataset
    progress(0, 1, "reading data")
    frame = load_columns(dataset, release.columns)
    try:
        schema = mechanisms.Schema.from_dict(dataset.schema)
        return mechanisms.run_release(
            release.mechanism,
            frame,
            schema,
            columns=release.columns,
            params=release.params,
            epsilon=float(release.epsilon),
            delta=float(release.delta),
            neighbouring=release.neighbouring,
            rng=None,
            progress=lambda done, total: progress(done, total, "running"),
        )
    except mechanisms.MechanismError as exc:
        raise ReleaseInputError(str(exc)) from exc
