"""Summary statistics in the portal (`mechanisms.statistics`): counts, sums, means, variances,
medians and percentiles per group, each with its 95% interval; settings and preview words in
`portal`, error-bar charts in `charts`."""

from django import forms

from dpportal.releases.kinds.base import Kind
from dpportal.releases.kinds.statistics import figures as statistics_charts
from dpportal.releases.kinds.statistics import portal
from dpportal.releases.kinds.statistics import verdict as statistics_verdict
from mechanisms.statistics import parse_request
from mechanisms.statistics.aggregates import table_passes


class Statistics(Kind):
    legend = "Summary statistics settings"

    def good_for(self) -> str:
        return (
            "The figures a statistics office publishes: counts, sums, means, variances, "
            "medians and other percentiles of numeric columns, for every group of one or two "
            "categorical columns, each with its 95% interval."
        )

    def outputs(self) -> str:
        return (
            "statistics.csv (one row per statistic and group: estimate, 95% interval, noise "
            "scale and ε)."
        )

    def form_fields(self) -> dict[str, forms.Field]:
        return portal.form_fields()

    def check_columns(self, form, columns) -> None:
        """Nothing to check: it works on the columns themselves, not on a grid of cells."""

    def engine_tallies(self, schema, columns, params, epsilon, neighbouring) -> list:
        """The groups' sums and the quantiles' rank counts, one tally per pass over the table
        (`statistics.aggregates.table_passes`)."""
        request = parse_request(schema, params, epsilon=epsilon, neighbouring=neighbouring)
        return list(table_passes(schema, request))

    def params(self, form, cleaned):
        return portal.params(form.schema, cleaned["columns"], cleaned)

    def accuracy_lines(self, plan, schema, columns, row_count) -> list[str]:
        return portal.accuracy_lines(plan, schema)

    def preview_table(self, plan, schema, columns, n):
        return portal.preview_table(plan, schema)

    def preview_warnings(self, plan, schema, columns, row_count) -> list[str]:
        return portal.preview_warnings(plan)

    def preview_facts(self, dataset, columns, epsilon) -> dict:
        return portal.owner_facts(dataset, epsilon)

    def public_charts(self, release, schema) -> list[dict]:
        return statistics_charts.release_charts(release)

    def assess(
        self, schema, columns, frame, files, *, epsilon, neighbouring, **judged
    ) -> dict | None:
        """Each statistic against the raw rows and its promise (`statistics.verdict`)."""
        return statistics_verdict.assess(
            schema, columns, frame, files, epsilon=epsilon, neighbouring=neighbouring,
            params=judged.get("params") or {}, promise=judged.get("promises"),
        )  # fmt: skip

    def interval_note(self, name: str, header: list[str]) -> str:
        if "ci_lower" not in header:
            return ""
        return (
            "ci_lower and ci_upper: a 95% interval for the statistic's true value over the "
            "rows of its group (for counts: the number of rows; for means and medians: the "
            "mean or median itself), from the noise added and, for quantiles, the public grid "
            "of candidates."
        )


KIND = Statistics("statistics")
