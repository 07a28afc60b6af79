"""The portal's side of the summary-statistics release: form fields, parameters and preview
text (its error-bar charts: dpportal.releases.kinds.statistics.figures).

In the form, the numeric columns ticked in step 2 get the chosen statistics; the categorical
columns ticked there (at most two) group them. The groups are the schema's declared categories
(mechanisms.statistics), and every number shown comes from the public plan or the released
statistics.csv, never from the raw data.
"""

from django import forms

import mechanisms
from dpportal.core.formatting import rounded_number

KINDS = (
    ("count", "Count of rows"),
    ("sum", "Sum"),
    ("mean", "Mean"),
    ("variance", "Variance"),
    ("std", "Standard deviation"),
    ("median", "Median"),
    ("quantiles", "Quantiles (the percentiles below)"),
)


def form_fields() -> dict[str, forms.Field]:
    """The settings of a statistics release (the ReleaseForm adds them)."""
    return {
        "stats_kinds": forms.MultipleChoiceField(
            label="Statistics",
            choices=KINDS,
            required=False,
            initial=["count", "mean"],
            widget=forms.CheckboxSelectMultiple,
            help_text="Computed for every numeric column ticked in step 2, for every group of "
            "the categorical columns ticked there (at most two; their declared categories).",
        ),
        "stats_quantiles": forms.CharField(
            label="Percentiles",
            required=False,
            initial="10, 25, 75, 90",
            help_text="For “Quantiles”: percentiles between 0 and 100, separated by commas.",
        ),
        "stats_weights": forms.CharField(
            label="Budget split",
            required=False,
            help_text="Optional: one weight per statistic, in the order of the preview below "
            "(for example 2, 1, 1). Leave empty to split ε evenly.",
        ),
    }


def params(schema, columns, cleaned) -> dict:
    """The mechanism's parameters from the form: statistics per numeric column, groups."""
    numeric = [c for c in columns if isinstance(schema.column(c), mechanisms.schema.NumericColumn)]
    by = [c for c in columns if c not in numeric]
    stats = []
    for kind in cleaned.get("stats_kinds") or []:
        if kind == "count":
            stats.append("count")
        elif kind == "quantiles":
            stats += [f"q{p}:{c}" for c in numeric for p in _percentiles(cleaned)]
        else:
            stats += [f"{kind}:{c}" for c in numeric]
    result = {"stat": stats, "by": by}
    if (cleaned.get("stats_weights") or "").strip():
        result["weights"] = cleaned["stats_weights"]
    return result


def _percentiles(cleaned) -> list[str]:
    text = cleaned.get("stats_quantiles") or ""
    return [p.strip() for p in text.split(",") if p.strip()]


def accuracy_lines(plan) -> list[str]:
    """Each statistic's ε and expected 95% interval, before anything is spent."""
    details = plan.details
    groups = details["groups"]
    lines = [
        f"{len(details['statistics'])} statistics over {groups:,} "
        + ("group" if groups == 1 else f"groups (about {details['group_rows']:,.0f} rows each)")
        + ". Expected 95% intervals:"
    ]
    for row in details["statistics"]:
        name = row["statistic"] + (f" of {row['column']}" if row["column"] else "")
        if row["epsilon"] == 0:
            lines.append(f"{name}: exact (the number of rows is public), ε = 0.")
            continue
        unit = row["unit"]
        half = f"±{rounded_number(float(row['halfwidth']), 3)} {unit}"
        lines.append(f"{name}: ε = {rounded_number(float(row['epsilon']), 4)}, typically {half}.")
    lines.append("Quantile intervals are conservative; groups with few rows get wider intervals.")
    if missing := details.get("missing_left_out"):
        lines.append(missing_note(missing))
    return lines


def missing_note(columns) -> str:
    """The sentence that says which columns' missing values the statistics leave out."""
    return (
        f"Missing values of {', '.join(columns)} are left out of its statistics: means and "
        "variances divide by a noisy count of the values present (not by the number of rows)."
    )
