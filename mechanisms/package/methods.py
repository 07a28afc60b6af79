"""The method behind each mechanism in two plain paragraphs, with its paper, for the report.

A mechanism without an entry here is described by its catalogue summary (a new catalogue row
needs no change here to be published).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mechanisms.catalogue import CATALOGUE


@dataclass(frozen=True)
class Method:
    """Two paragraphs on how the numbers were made, and the paper they come from."""

    paragraphs: tuple[str, str]
    paper: str


_HISTOGRAM_PAPER = (
    "L. Wasserman and S. Zhou (2010), A statistical framework for differential privacy. "
    "Journal of the American Statistical Association 105(489), 375-389."
)
METHODS = {
    "perturbed_histogram": Method(
        (
            "The table was divided into cells: one per combination of the released columns' "
            "bins and categories, all declared in advance from public knowledge. The number "
            "of rows in every cell was counted, and a whole number of random noise (discrete "
            "Laplace) was added to each count. The noise is large enough that no one "
            "person's row changes the published counts noticeably, whatever else is known.",
            "The noisy counts are published as they are (so they are unbiased: on average "
            "they equal the true counts, and they can be negative). The synthetic rows were "
            "drawn from the noisy counts after negative ones were set to zero; drawing them "
            "costs no further privacy.",
        ),
        _HISTOGRAM_PAPER + " Section 4.2 (perturbed histogram).",
    ),
    "smoothed_histogram": Method(
        (
            "The table was divided into cells declared in advance, and the share of rows in "
            "each cell was mixed with a uniform share over all cells. Synthetic rows were then "
            "drawn from this smoothed distribution; the mixing weight and the number of rows "
            "drawn are set so that the draw itself is differentially private.",
            "No noisy counts exist for this method: the published counts are the numbers of "
            "synthetic rows in each cell. They never go below zero, and every cell gets some "
            "rows through the uniform part, which pulls small cells up and large cells down.",
        ),
        _HISTOGRAM_PAPER + " Section 4.1 (smoothed histogram).",
    ),
    "mwem": Method(
        (
            "MWEM starts from a uniform guess of the table and improves it over a number of "
            "rounds. In each round it privately chooses the query of the workload (a "
            "marginal or a range) on which the guess is worst (exponential mechanism), "
            "measures that query with added noise (discrete Laplace), and updates the guess "
            "towards the measurement (multiplicative weights).",
            "The synthetic rows are drawn from the final guess. They reproduce the measured "
            "queries well and other patterns less well; the noisy measurements themselves "
            "are published too (measurements.json).",
        ),
        "M. Hardt, K. Ligett and F. McSherry (2012), A simple and practical algorithm for "
        "differentially private data release. Advances in Neural Information Processing "
        "Systems 25.",
    ),
    "range_count": Method(
        (
            "The values of the released numeric columns were placed on a grid of points "
            "declared in advance. A structure of noisy counts over groups of those points "
            "(a tree, a decomposition or the points themselves, chosen from public "
            "information) was measured with whole-number noise (discrete Laplace, or "
            "discrete Gaussian when delta is above 0).",
            "Each published answer (how many rows fall in a range, box or half-space) adds "
            "up noisy counts of the structure, so its error is known in advance: the "
            "variance column states it. New ranges can be answered from structure.json later "
            "at no further privacy cost.",
        ),
        "S. Muthukrishnan and A. Nikolov (2012), Optimal private halfspace counting via "
        "discrepancy. Proceedings of the 44th ACM Symposium on Theory of Computing, 1285-1292.",
    ),
}


def setting_notes(manifest: dict[str, Any]) -> list[str]:
    """What the mechanism said about its own settings in this release, in sentences.

    The non-empty "note" of each recorded setting that has one (such as MWEM's memory budget
    when it left patterns out).
    """
    settings = manifest.get("parameters") or {}
    return [
        str(value["note"])
        for value in settings.values()
        if isinstance(value, dict) and value.get("note")
    ]


def method(name: str) -> Method:
    """The method of the mechanism `name` (its catalogue summary when it has no entry)."""
    if name in METHODS:
        return METHODS[name]
    summary = CATALOGUE[name].summary if name in CATALOGUE else name
    return Method((f"Method: {summary}.", "See the manifest for its parameters."), summary)
