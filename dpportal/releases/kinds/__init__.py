"""One folder per mechanism: the portal's half of each row of `mechanisms.CATALOGUE`.

`kind_of(name)` is the one place the portal turns a mechanism's name into behaviour: the kind
folder's `KIND` when there is one, else a generic `Kind` that works from the catalogue row
alone (`kinds.base`). Pages, forms, the preview, the planner, the worker's report and the API
call the kind's methods; nothing outside this folder branches on a mechanism's name.
"""

import mechanisms
from dpportal.releases import packaging
from dpportal.releases.kinds import (
    mwem,
    perturbed_histogram,
    range_count,
    smoothed_histogram,
    statistics,
)
from dpportal.releases.kinds.base import Kind

FOLDERS: dict[str, Kind] = {
    folder.KIND.name: folder.KIND
    for folder in (perturbed_histogram, smoothed_histogram, mwem, range_count, statistics)
}
CHARTS_LAYOUT = 5  # bump when the public charts change: recomputes cached chart data


def kind_of(name: str) -> Kind:
    """The portal's half of the mechanism `name` (generic when it has no folder)."""
    return FOLDERS.get(name) or Kind(name)


def all_kinds() -> list[Kind]:
    """The kinds the release form, the API's list of kinds and its OpenAPI document offer: one
    per catalogue row, in catalogue order, but for the rows that describe a schema (the DP
    estimate of bounds and categories, offered on the schema page instead)."""
    return [
        kind_of(name) for name, spec in mechanisms.CATALOGUE.items() if not spec.describes_schema
    ]


def describes_schema(name: str) -> bool:
    """Whether releases of `name` find a schema's metadata (the schema page's DP estimate):
    their result is shown on their page, and they have no package to download."""
    spec = mechanisms.CATALOGUE.get(name)
    return spec is not None and spec.describes_schema


def public_charts(release, schema) -> list[dict]:
    """The public charts of a finished release, computed from its public files once and kept."""
    kind = kind_of(release.mechanism)
    return packaging.cached_json(
        release, f"charts-v{CHARTS_LAYOUT}", lambda: kind.public_charts(release, schema)
    )
