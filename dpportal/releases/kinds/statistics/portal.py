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


def accuracy_lines(plan, schema) -> list[str]:
    """Each statistic's ε and expected 95% interval in a group of the average size, which
    groups are withheld, and what missing values and person-level privacy mean for them."""
    details = plan.details
    facts = details.get("owner_facts") or {}
    groups = details["groups"]
    lines = [
        f"{len(details['statistics'])} statistics over {groups:,} "
        + ("group" if groups == 1 else f"groups (about {details['group_rows']:,.0f} rows each)")
        + ". Expected 95% intervals in a group of that size:"
    ]
    group = schema.person.group_size(facts["neighbouring"]) if _person_level(schema, facts) else 1
    for row in details["statistics"]:
        lines.append(_statistic_line(row, _average_values(row, details, facts), group))
    if group > 1 and (person := person_level_line(details["statistics"], schema.person, facts)):
        lines.append(person)
    lines.append(
        "Quantile intervals are conservative; groups with fewer rows get wider intervals (the "
        "table below gives them by group size)."
    )
    lines += withheld_lines(details["statistics"])
    if missing := details.get("missing_left_out"):
        lines.append(missing_note(missing, facts))
    return lines


def _person_level(schema, facts) -> bool:
    """Whether the preview speaks per person: a person column, and the owner's facts that say
    which neighbouring relation sets a person's rows' ε."""
    return schema.person is not None and bool(facts)


def _name(row) -> str:
    return row["statistic"] + (f" of {row['column']}" if row["column"] else "")


def _statistic_line(row, values: float, group: int = 1) -> str:
    """One statistic's ε and expected interval; at person level (`group` rows change with one
    person) its ε per row and, beside it, what a person's rows get together."""
    name = _name(row)
    if row["epsilon"] == 0:
        return f"{name}: exact (the number of rows is public), ε = 0."
    epsilon = float(row["epsilon"])
    spent = f"ε = {rounded_number(epsilon, 4)}"
    if group > 1:
        spent += f" per row ({rounded_number(group * epsilon, 4)} per person)"
    return f"{name}: {spent}, {within(row, values)}."


def within(row, values: float) -> str:
    """The expected 95% half-width of one statistic's preview in a group of `values` values.

    Counts and sums: the same for every group. Means, variances and standard deviations: the
    preview's half-width scales as 1 / values (exactly: every noise term of their linearised
    error is divided by the count), and an interval of half the statistic's whole span or
    more (`span`: the declared range, r^2 or r) covers about all of it. Quantiles: the rank
    margin as percentile points of the group, or the whole declared range where a group of
    that many values skips the interval's pick (`mechanisms.statistics.margin_reaches`, as the
    release decides from the bound on a group's rows)."""
    half, unit, stat = float(row["halfwidth"]), row["unit"], row["statistic"]
    if stat in ("count", "sum"):
        return f"typically ±{rounded_number(half, 3)} {unit}"
    if unit != "rows of rank":
        scaled = half * float(row["size"]) / max(values, 1.0)
        if scaled >= row["span"] / 2:
            return "interval: about the whole declared range"
        return f"typically ±{rounded_number(scaled, 3)} {unit}"
    share = half / max(values, 1.0)
    if mechanisms.statistics.margin_reaches(_alpha(stat), half, max(values, 1.0)):
        return "interval: the whole declared range"
    return f"within ±{100 * share:.3g} percentile points (a rank error of ±{half:,.0f} rows)"


def _alpha(statistic: str) -> float:
    return 0.5 if statistic == "median" else float(statistic.removeprefix("q")) / 100


def _average_values(row, details, facts) -> float:
    """The values of the statistic's column in a group of the average size: its rows, less the
    share of missing values counted at upload (owner-only facts), if any."""
    rows = float(details["group_rows"])
    return rows * present_share(row["column"], facts)


def present_share(column, facts) -> float:
    """The share of rows with a value of `column`, from the owner-only upload counts (1 if
    none are known)."""
    missing = (facts.get("missing_values") or {}).get(column)
    total = facts.get("rows") or 0
    if not missing or not total:
        return 1.0
    return max(1.0 - missing / total, 0.0)


def withheld_lines(statistics) -> list[str]:
    """Which groups are withheld: the rule, and per deciding count the rows a group needs."""
    needs: dict[tuple[str, float], list[str]] = {}
    for row in statistics:
        if row["threshold"] > 0 and row["statistic"] != "count":
            needs.setdefault((row["source"], row["threshold"]), []).append(_name(row))
    if not needs:
        return []
    parts = [
        f"{', '.join(names)}: above {threshold:,.0f} ({source})"
        for (source, threshold), names in needs.items()
    ]
    return [
        "A group's estimate is published only where a noisy count shows rows there (any group "
        "may hold none, such as “(other)” or “(missing)”): elsewhere its row says “too few rows "
        "to publish”. The noisy count must be: " + "; ".join(parts) + ". Counts "
        "themselves are always published, marked where they do not show rows."
    ]


def missing_note(columns, facts=None) -> str:
    """The sentence that says which columns' missing values the statistics leave out, with
    how many there are when the owner's upload counted them (owner-only)."""
    facts = facts or {}
    counted = facts.get("missing_values") or {}
    known = [f"{counted[c]:,} in {c}" for c in columns if c in counted]
    sentence = (
        f"Missing values of {', '.join(columns)} are left out of its statistics: means and "
        "variances divide by a noisy count of the values present (not by the number of rows), "
        "and groups hold fewer values than rows."
    )
    if known:
        sentence += (
            f" Your upload had {', '.join(known)} (of {facts['rows']:,} rows; counted when it "
            "was read, shown to you only); the intervals above allow for them."
        )
    return sentence


def person_level_line(statistics, person, facts) -> str:
    """Why each statistic's ε is so small at person level, with the first one worked out."""
    group = person.group_size(facts["neighbouring"])
    paid = [row for row in statistics if row["epsilon"] > 0]
    if not paid:
        return ""
    first = paid[0]
    row_epsilon = float(first["epsilon"])
    change = "replacing" if facts["neighbouring"] == "replace-one" else "adding or removing"
    return (
        f"Each ε above is per row: a person has up to {person.max_rows} rows, so {change} one "
        f"person changes up to {group} rows, and the ε = {rounded_number(facts['epsilon'], 6)} "
        f"you spend protects each person while every row gets 1/{group} of it. Split over "
        f"{len(paid)} statistics, {_name(first)} gets {group} × "
        f"{rounded_number(row_epsilon, 4)} = {rounded_number(group * row_epsilon, 4)} for a "
        "person's rows together."
    )


def preview_table(plan, schema) -> tuple[list[dict], list[dict]]:
    """The preview's table: each statistic's expected 95% interval by group size, and how
    often a group of that size is published at all."""
    details = plan.details
    facts = details.get("owner_facts") or {}
    rows = []
    for row in details["statistics"]:
        if row["epsilon"] == 0:
            continue
        share = present_share(row["column"], facts)
        if row["statistic"] == "count":
            rows.append(
                {
                    "output": f"{_name(row)}, every group",
                    "within": within(row, 1.0),
                    "note": "the same for groups of any size; always published",
                }
            )
            continue
        for entry in row["by_size"]:
            values = float(entry["size"]) * share
            rows.append(
                {
                    "output": f"{_name(row)}, a group of {entry['size']:,} rows",
                    "within": within(row, max(values, 1.0)),
                    "note": _published_words(entry["published"]),
                }
            )
    return rows, []


def _published_words(share: float) -> str:
    if share >= 0.995:
        return "published"
    if share < 0.01:
        return "withheld: too few rows to publish"
    return f"published in about {share:.0%} of releases (withheld in the rest)"


def owner_facts(dataset, epsilon) -> dict:
    """OWNER-ONLY facts the preview states beyond the public plan (never published).

    The ε asked, the relation and the stored row count, and for an upload the empty cells per
    column its reading counted (the owner-only profile; a table that stays where it lives was
    never read, so it has none).
    """
    proposals = (dataset.profile or {}).get("proposals") or []
    return {
        "epsilon": float(epsilon),
        "neighbouring": dataset.neighbouring,
        "rows": dataset.row_count,
        "missing_values": {p["name"]: int(p["missing"]) for p in proposals if p.get("missing")},
    }


def preview_warnings(plan) -> list[str]:
    """What the statistics preview warns against: statistics whose interval in a group of the
    average size is the whole declared range, or which such a group would mostly not get."""
    details = plan.details
    facts = details.get("owner_facts") or {}
    rows = float(details["group_rows"])
    whole, withheld = [], []
    for row in details["statistics"]:
        if row["epsilon"] == 0 or row["statistic"] in ("count", "sum"):
            continue
        if "whole declared range" in within(row, _average_values(row, details, facts)):
            whole.append(_name(row))
        average = min(row["by_size"], key=lambda entry: abs(entry["size"] - rows))
        if average["published"] < 0.5:
            withheld.append(_name(row))
    warnings = []
    if whole:
        warnings.append(
            f"In a group of the average size ({rows:,.0f} rows) the 95% interval of "
            f"{', '.join(whole)} is about the whole declared range: it will say next to "
            "nothing. A larger ε, fewer statistics or fewer groups would help."
        )
    if withheld:
        warnings.append(
            f"A group of the average size ({rows:,.0f} rows) will mostly get no estimate of "
            f"{', '.join(withheld)} (“too few rows to publish”): its noisy count at this ε "
            "rarely shows its rows."
        )
    return warnings
