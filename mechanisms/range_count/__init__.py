"""Private range counting over a public support (intervals, boxes, halfspaces).

Mechanisms: `mn12` (Muthukrishnan-Nikolov decomposition, zCDP), `tree` (b-ary hierarchy with
least squares), `path_tree` (binary tree over a Hilbert path through the support), `identity`,
`per_query`, and `auto` (smallest predicted error, chosen from public inputs only).
"""

from mechanisms.range_count.api import (
    RangeCountResult,
    answer_intervals,
    answer_queries,
    range_count,
    range_count_release,
)
from mechanisms.range_count.inputs import (
    Support,
    all_prefixes,
    grid_support,
    incidence,
    load_workload,
    point_support,
    random_boxes,
    random_halfspaces,
)

__all__ = [
    "RangeCountResult",
    "Support",
    "all_prefixes",
    "answer_intervals",
    "answer_queries",
    "grid_support",
    "incidence",
    "load_workload",
    "point_support",
    "random_boxes",
    "random_halfspaces",
    "range_count",
    "range_count_release",
]
