"""The planner: from the accuracy the custodian needs to the ε each mechanism would spend.

The custodian states "within ±k at 95%" (rows for counts and range answers, each statistic in
its own unit; or a share of the row count, where that count is public). For every mechanism,
with the columns and settings chosen on the form, the one planner of `mechanisms.planner`
(`plan_epsilon`, the command line's `plan` too) proposes the smallest ε whose promise meets
it, or says why none does, and shows the budget left beside it. The promise is the one the
verdict later checks (`promise_check`). The API's planner is this module too. Public
quantities only: the schema, the settings, the row count (public under replace-one without a
person column; otherwise the planner asks for rows, not a share). No data is read and nothing
is spent.
"""

from decimal import Decimal

from django import forms

import mechanisms
from dpportal.access.rules import row_count_is_public
from dpportal.core.form_fields import DECIMAL_INPUT
from dpportal.core.formatting import plain_number
from dpportal.releases import catalogue, promise_check
from dpportal.releases.forms import ReleaseForm
from dpportal.releases.kinds import kind_of
from mechanisms import planner

PLACEHOLDER_EPSILON = "1"  # only to validate the other settings; each mechanism is re-planned


class TargetForm(forms.Form):
    """The accuracy asked for: ±rows, or ±a percentage of the (public) row count."""

    target_rows = forms.FloatField(
        label="Counts within ± (rows)",
        required=False,
        min_value=0.5,
        widget=DECIMAL_INPUT,
        help_text="For example 50: each count within ±50 rows of the truth, 95 times in 100 "
        "(summary statistics: each in its own unit).",
    )
    target_percent = forms.FloatField(
        label="or within ± (% of all rows)",
        required=False,
        min_value=0.001,
        max_value=100,
        widget=DECIMAL_INPUT,
    )

    def __init__(self, *args, dataset, **kwargs):
        super().__init__(*args, **kwargs)
        self.dataset = dataset
        if not row_count_is_public(dataset):
            del self.fields["target_percent"]  # add-remove or a person column: n is private

    def clean(self):
        super().clean()
        data = self.cleaned_data
        rows, percent = data.get("target_rows"), data.get("target_percent")
        if self.errors:
            return data
        if rows is None and percent is None:
            raise forms.ValidationError("Enter the accuracy you need: a number of rows.")
        if rows is not None and percent is not None:
            raise forms.ValidationError("Enter rows or a percentage, not both.")
        data["target"] = rows if percent is None else percent / 100 * self.dataset.row_count
        if data["target"] < 0.5:
            raise forms.ValidationError(
                f"{percent}% of the {self.dataset.row_count:,} rows is under half a row: "
                "counts are whole numbers, so ask for at least 1 row."
            )
        return data


def proposals(dataset, query, target: float, *, remaining=None) -> list[dict]:
    """One row per mechanism: the ε that reaches ±target at 95%, or why none can, and whether
    it fits in `remaining` (default: what is left of the dataset's budget; an analyst's page
    gives its allotment's)."""
    remaining = dataset.epsilon_remaining if remaining is None else remaining
    return [_proposal(dataset, query, card, target, remaining) for card in catalogue.cards()]


def _proposal(dataset, query, card, target, remaining) -> dict:
    row = {"mechanism": card.name, "title": card.title, "epsilon": None, "reason": ""}
    data = query.copy()
    data["mechanism"], data["epsilon"] = card.name, PLACEHOLDER_EPSILON
    form = ReleaseForm(data, dataset=dataset)
    if not form.is_valid():
        row["reason"] = _first_error(form)
        return row
    kind, cleaned = kind_of(card.name), form.cleaned_data
    params = kind.planning_params(form, form.params(), cleaned)
    request = promise_check.plan_request(
        dataset, card.name, cleaned["columns"], params, cleaned["delta"]
    )
    try:
        proposal = planner.plan_epsilon(request, target)
    except mechanisms.MechanismError as exc:
        row["reason"] = f"These settings cannot work: {exc}"
        return row
    if proposal.epsilon is None:
        row["reason"] = proposal.reason[:1].upper() + proposal.reason[1:] + "."
        return row
    needed = Decimal(repr(proposal.epsilon))
    settings = {k: v for p in proposal.promises for k, v in p.settings.items()}
    row.update(
        epsilon=plain_number(needed),
        fits=needed <= remaining,
        left=plain_number(remaining - needed),
        planned="; ".join(p.sentence() for p in proposal.promises),
        settings={k: str(v) for k, v in settings.items()},
    )
    return row


def _first_error(form) -> str:
    for name, errors in form.errors.items():
        label = form.fields[name].label if name in form.fields else ""
        return f"{label}: {errors[0]}" if label else str(errors[0])
    return ""
