"""The contract between the portal and one mechanism, with generic defaults.

A `Kind` is the portal's half of one row of `mechanisms.CATALOGUE`: its words on the form, its
settings (form fields and the parameters they make), its accuracy preview, the sections and
charts of its results page, and the custodian-only comparison and verdict. Every method has a
default that works from the catalogue row alone (summary, files, parameters, noise plan), so a
new mechanism shows up everywhere with one catalogue row; a folder under `kinds/` overrides
only what it does differently. Nothing here reads raw data except `custodian_report` and
`assess`, which run in the worker and are stored for the owner alone.
"""

from typing import Any

import pandas as pd
from django import forms

import mechanisms
from dpportal.core.form_fields import DECIMAL_INPUT, WHOLE_NUMBER_INPUT
from dpportal.releases import accuracy_preview, packaging
from dpportal.releases.chart_style import RELEASE_COLOUR, plotly_text
from dpportal.releases.chart_style import layout as chart_layout
from mechanisms import accuracy
from mechanisms.catalogue import MechanismSpec, Parameter
from mechanisms.counting.tally import CellTally

MAX_GENERIC_BARS = 60  # rows of a generic results chart


class Kind:
    """The portal's half of the catalogue mechanism `name` (generic defaults)."""

    needs_public_row_count = False
    legend = ""  # the settings fieldset's legend ("" = "<title> settings")

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def spec(self) -> MechanismSpec:
        return mechanisms.catalogue.spec(self.name)

    @property
    def title(self) -> str:
        return self.spec.title

    def good_for(self) -> str:
        """What the new-release card says the release is good for."""
        return self.spec.summary

    def outputs(self) -> str:
        """What the card says you get: the public files and what each holds."""
        return "; ".join(f"{name} ({what})" for name, what in self.spec.files.items())

    # ------------------------------------------------------------ the form

    def form_fields(self) -> dict[str, forms.Field]:
        """The form fields of its settings: one per catalogue parameter, named `<kind>__<p>`."""
        return {f"{self.name}__{p.name}": parameter_field(p) for p in self.spec.parameters}

    def field_names(self) -> tuple[str, ...]:
        return tuple(self.form_fields())

    def refusal(self, dataset) -> str:
        """Why this dataset cannot have this kind of release ("" when it can)."""
        return ""

    def check_columns(self, form, columns: list[str]) -> None:
        """Add form errors for columns this kind cannot release (default: the cells fit)."""
        try:
            form.schema.domain_shape(columns)
        except mechanisms.MechanismError as exc:
            form.add_error("columns", str(exc))

    def engine_tallies(
        self, schema, columns: list[str], params: dict[str, Any], epsilon: float, neighbouring: str
    ) -> list:
        """The exact aggregates an engine computes for this release where its table lives
        (`mechanisms.counting.tally`), from public inputs alone (the schema and the settings),
        so the engine's limits are checked before any budget is spent (default: the cell
        counts of the columns)."""
        accepting = schema.accepting()
        names = tuple(accepting.resolve_columns(columns))
        return [CellTally(accepting, names)]

    def params(self, form, cleaned: dict[str, Any]) -> dict[str, Any]:
        """The mechanism's parameters from the cleaned form (empty fields left to defaults)."""
        prefix = f"{self.name}__"
        return {
            key[len(prefix) :]: value
            for key, value in cleaned.items()
            if key.startswith(prefix) and value not in (None, "")
        }

    def planning_params(
        self, form, params: dict[str, Any], cleaned: dict[str, Any]
    ) -> dict[str, Any]:
        """The parameters the planner (`mechanisms.planner`) re-plans at each ε: what the form
        re-chooses for each ε left for the planner to choose by the same rule (default: the
        form's, unchanged)."""
        return params

    # ------------------------------------------------------------ the accuracy preview

    def accuracy_lines(self, plan, schema, columns: list[str], row_count: int) -> list[str]:
        """Plain sentences from the public noise plan."""
        return [
            f"Each of its {plan.outputs:,} outputs gets {plan.noise} noise of typically "
            f"±{plan.expected_error:,.1f} rows."
        ]

    def preview_warnings(self, plan, schema, columns: list[str], row_count: int) -> list[str]:
        """What the accuracy preview warns against, in sentences: a release that spends its ε
        on output that will be mostly noise. The form then asks for an explicit confirmation
        before spending (`ReleaseForm`; default: no warning)."""
        return []

    def preview_facts(self, dataset, columns: list[str], epsilon) -> dict[str, Any]:
        """OWNER-ONLY facts the accuracy preview may state beyond the public plan (such as
        counts from the upload's profile); kept in the plan's details["owner_facts"], shown on
        the owner's form only, never published (default: none)."""
        return {}

    def preview_table(
        self, plan, schema, columns: list[str], n: int
    ) -> tuple[list[dict], list[dict]]:
        """(interval rows, expected marginal errors) of the preview's table."""
        half = accuracy.plan_half_width(plan, n)
        if half is None:
            return [], []
        approx = "" if plan.noise == "discrete Laplace" else " (normal approximation)"
        row = accuracy_preview.interval_row(
            f"Each of the {plan.outputs:,} outputs", half, f"{plan.noise}{approx}"
        )
        return [row], []

    def progress_label(self, done: int, total: int) -> str:
        return f"Running: step {done} of {total}"

    # ------------------------------------------------------------ the results page

    def preview_files(self) -> tuple[str, ...]:
        """The public CSV files its results page previews, first shown first."""
        return tuple(name for name in self.spec.files if name.endswith(".csv"))

    def preview_note(self, name: str) -> str:
        """A sentence under the preview of the file `name` ("" for none)."""
        return ""

    def interval_note(self, name: str, header: list[str]) -> str:
        """What ci_lower and ci_upper of the previewed file mean ("" when it has none)."""
        if "ci_lower" not in header:
            return ""
        return (
            "ci_lower and ci_upper: a 95% interval for the true count, from the exact "
            "distribution of the noise added (95 counts in 100 fall inside their interval; "
            "the rest just outside)."
        )

    def public_charts(self, release, schema) -> list[dict]:
        """Charts of the public files only: bars of the first previewed file's first numeric
        column, with its 95% interval when the file has ci_lower and ci_upper."""
        for name in self.preview_files():
            if name in packaging.stored_names(release):
                chart = generic_chart(
                    name, packaging.read_csv(packaging.stored_file(release, name))
                )
                return [chart] if chart else []
        return []

    def results_sections(self, request, release) -> dict[str, Any]:
        """Extra context of its results page (public parts only)."""
        return {}

    # ------------------------------------------------------------ custodian only

    def custodian_report(self, schema, columns, frame, files) -> dict[str, Any]:
        """CUSTODIAN-ONLY: comparisons of the public files with the raw `frame`."""
        return {}

    def assess(
        self, schema, columns, frame, files, *, epsilon, neighbouring, **judged
    ) -> dict | None:
        """CUSTODIAN-ONLY: good / usable with care / not usable (None: no verdict).

        `judged` (`promise_check.judged`): `promises`, the planner's promise for this release at
        its ε (None when it cannot be planned), which the verdict checks first; `dropped`, rows
        the release dropped by bounding persons (then the truth it is about is not known
        here); `params`, the release's parameters."""
        return None


def parameter_field(parameter: Parameter) -> forms.Field:
    """A form field for one catalogue parameter: a choice, a bounded number, or text."""
    common: dict[str, Any] = {
        "label": parameter.name.replace("_", " ").capitalize(),
        "required": False,
        "help_text": parameter.help,
    }
    if parameter.choices:
        choices = [(c, c) for c in parameter.choices]
        return forms.ChoiceField(choices=choices, initial=parameter.default, **common)
    low, high = parameter.bounds
    if parameter.type is int:
        widget = WHOLE_NUMBER_INPUT
        return forms.IntegerField(min_value=low, max_value=high, widget=widget, **common)
    if parameter.type is float:
        return forms.FloatField(min_value=low, max_value=high, widget=DECIMAL_INPUT, **common)
    return forms.CharField(**common)


def generic_chart(name: str, table: pd.DataFrame) -> dict | None:
    """Bars of a public table's estimates (its "estimate" column, else its first numeric one),
    labelled by its first other column, with 95% error bars from ci_lower / ci_upper."""
    numbers = table.apply(pd.to_numeric, errors="coerce")
    numeric = [c for c in table.columns if numbers[c].notna().any()]
    if not numeric:
        return None
    value = "estimate" if "estimate" in numeric else numeric[0]
    shown = numbers.head(MAX_GENERIC_BARS)
    others = [c for c in table.columns if c not in numeric]
    labels = (
        table[others[0]].head(MAX_GENERIC_BARS).astype(str).tolist()
        if others
        else [str(i + 1) for i in range(len(shown))]
    )
    trace: dict[str, Any] = {
        "type": "bar",
        "x": [plotly_text(label) for label in labels],
        "y": shown[value].tolist(),
        "marker": {"color": RELEASE_COLOUR},
    }
    if {"ci_lower", "ci_upper"} <= set(numeric):
        trace["error_y"] = {
            "type": "data",
            "symmetric": False,
            "array": (shown["ci_upper"] - shown[value]).tolist(),
            "arrayminus": (shown[value] - shown["ci_lower"]).tolist(),
        }
    title = f"{name}: {value}"
    figure = {"data": [trace], "layout": chart_layout(title, yaxis={"title": {"text": value}})}
    note = f"The first {MAX_GENERIC_BARS} rows of {name}." if len(table) > MAX_GENERIC_BARS else ""
    return {"title": title, "figure": figure, "note": note, "good": ""}
