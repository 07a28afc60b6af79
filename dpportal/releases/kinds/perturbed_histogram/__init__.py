"""The noisy histogram in the portal (`mechanisms.histogram.perturbed_histogram`): counts per
combination of the chosen columns, each with discrete Laplace noise, and synthetic rows drawn
from them."""

from dpportal.releases import comparisons, packaging
from dpportal.releases.accuracy_preview import (
    SPREAD_NOTE,
    even_table_tvd,
    interval_row,
    marginal_row,
)
from dpportal.releases.kinds.synthetic import (
    HistogramKind,
    bins_advice,
    combinations,
    relative_error_line,
    relative_error_warning,
)
from mechanisms import accuracy
from mechanisms.accuracy import discrete_laplace_std


class PerturbedHistogram(HistogramKind):
    def good_for(self) -> str:
        return (
            "Counts of people per combination of a few columns (for example age group × sex), "
            "and a synthetic table with the same counts. Simple and predictable."
        )

    def outputs(self) -> str:
        return "noisy_counts.csv (one noisy count per cell) and synthetic.csv (made-up rows)."

    def accuracy_lines(self, plan, schema, columns, row_count) -> list[str]:
        return [
            f"The chosen columns make {combinations(schema, columns)}. Each combination's "
            f"count gets random noise of typically ±{plan.expected_error:,.1f} rows.",
            relative_error_line(plan.expected_error, row_count / plan.support),
            *bins_advice(schema, columns, row_count),
        ]

    def preview_warnings(self, plan, schema, columns, row_count) -> list[str]:
        return relative_error_warning(plan.expected_error, row_count / plan.support)

    def preview_table(self, plan, schema, columns, n):
        half = accuracy.plan_half_width(plan, n)
        variance, cells = discrete_laplace_std(plan.scale or 0.0) ** 2, plan.support
        rows = [
            interval_row(
                f"Each of the {cells:,} cell counts (noisy_counts.csv)",
                half,
                f"an average cell holds about {n / cells:,.0f} rows",
            )
        ]
        synthetic = n  # the default synthetic rows
        marginals = [
            marginal_row(
                " × ".join(columns),
                even_table_tvd(cells, variance, n, synthetic),
                f"the whole table, noise and sampling, {SPREAD_NOTE}",
            )
        ]
        for name in columns if len(columns) > 1 else []:
            k = schema.column(name).n_cells
            tvd = even_table_tvd(k, variance * cells / k, n, synthetic)
            marginals.append(marginal_row(name, tvd, SPREAD_NOTE))
        return rows, marginals

    def custodian_report(self, schema, columns, frame, files) -> dict:
        report = super().custodian_report(schema, columns, frame, files)
        if "noisy_counts.csv" in files:
            noisy = packaging.read_csv(files["noisy_counts.csv"])
            report["cells"] = comparisons.cell_errors(schema, columns, frame, noisy)
        return report


KIND = PerturbedHistogram("perturbed_histogram")
