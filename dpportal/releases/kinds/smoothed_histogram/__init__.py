"""The smoothed histogram in the portal (`mechanisms.histogram.smoothed_histogram`): synthetic
rows drawn from a blend of the real histogram and an even spread; needs a public row count."""

import math

from dpportal.releases.accuracy_preview import (
    SPREAD_NOTE,
    even_table_tvd,
    interval_row,
    marginal_row,
)
from dpportal.releases.kinds.synthetic import HistogramKind
from mechanisms import accuracy
from mechanisms.plans import smoothed_default_rows


class SmoothedHistogram(HistogramKind):
    def good_for(self) -> str:
        return (
            "Made-up rows drawn from a blend of the real histogram and an even spread over all "
            "cells; the blend, not added noise, protects privacy. Best with few cells. Needs "
            "the number of rows to be public."
        )

    def outputs(self) -> str:
        return "synthetic.csv (made-up rows) and noisy_counts.csv (how many made-up rows per cell)."

    def refusal(self, dataset) -> str:
        if dataset.neighbouring == "replace-one":
            return ""
        return (
            "The smoothed histogram needs the number of rows to be public (neighbouring: "
            "replace one row); choose the noisy histogram instead."
        )

    def params(self, form, cleaned):
        params = super().params(form, cleaned)
        if "rows" not in params:
            cells = math.prod(form.schema.domain_shape(cleaned["columns"]))
            params["rows"] = smoothed_default_rows(
                max(form.dataset.row_count, 1), cells, float(cleaned["epsilon"])
            )
        return params

    def planning_params(self, form, params, cleaned):
        if cleaned.get("rows"):
            return params
        return {key: value for key, value in params.items() if key != "rows"}  # per ε

    def accuracy_lines(self, plan, schema, columns, row_count) -> list[str]:
        rows, mix = plan.details["rows"], plan.details["mix"]
        per_cell = plan.outputs / plan.support
        return [
            f"{rows:,} synthetic rows will be drawn over {plan.support:,} cells. To protect "
            f"privacy, {mix:.0%} of them are spread evenly over all cells, whatever the data.",
            f"The rest follow the real distribution, with a sampling error of about "
            f"±{plan.expected_error:,.1f} rows in an average cell of {per_cell:,.1f} rows.",
        ]

    def preview_warnings(self, plan, schema, columns, row_count) -> list[str]:
        mix = plan.details["mix"]
        if mix <= 0.5:
            return []
        return [
            f"{mix:.0%} of the synthetic rows will be spread evenly over all cells, whatever "
            "the data: most of the table will say nothing about it. Ask for fewer rows, fewer "
            "columns or a larger ε."
        ]

    def preview_table(self, plan, schema, columns, n):
        rows_drawn, mix, cells = plan.details["rows"], plan.details["mix"], plan.support
        half = accuracy.plan_half_width(plan, n)
        rows = [
            interval_row(
                "The real count of an average cell, estimated from the "
                f"{rows_drawn:,} synthetic rows",
                half,
                "sampling variation of the synthetic rows (no noise is added)",
            )
        ]
        marginals = [
            marginal_row(
                " × ".join(columns),
                mix + even_table_tvd(cells, 0.0, n, rows_drawn),
                f"at most: {mix:.0%} of rows spread evenly, plus sampling, {SPREAD_NOTE}",
            )
        ]
        return rows, marginals

    def interval_note(self, name: str, header: list[str]) -> str:
        if "real_count_estimate" not in header:
            return super().interval_note(name, header)
        return (
            "ci_lower and ci_upper: a 95% interval for the real number of rows in the cell, "
            "estimated from the synthetic rows (real_count_estimate). It covers the random "
            "sampling of the synthetic rows, the only randomness this mechanism adds; cells "
            "with fewer than about 10 synthetic rows have less reliable intervals."
        )


KIND = SmoothedHistogram("smoothed_histogram")
