"""Forms of the analysts' pages: the owner's invitation with an allotment and the approval
rule, the analyst's request (the new-release form, spending from the allotment), a decision."""

from decimal import Decimal

from django import forms

from dpportal.access.rules import row_count_is_public
from dpportal.analysts.models import NOTE_LENGTH
from dpportal.core.form_fields import DECIMAL_INPUT, DisplayTextField, PlainDecimalField
from dpportal.releases.forms import ReleaseForm, suggested_epsilon

PRIVATE_ROW_COUNT = (
    "These settings cannot work with this dataset; change them (fewer columns, bins or "
    "statistics, another ε), or ask its owner which settings fit."
)


class AnalystInviteForm(forms.Form):
    email = forms.EmailField(label="E-mail address of the analyst", max_length=254)
    epsilon = PlainDecimalField(
        label="Allotment ε",
        max_digits=12,
        decimal_places=6,
        min_value=Decimal("0.000001"),
        widget=DECIMAL_INPUT,
        help_text="Taken from this dataset's budget now, as a reservation: nobody else can "
        "spend it, and what is left of it comes back if you revoke the analyst.",
    )
    delta = PlainDecimalField(
        label="Allotment δ",
        max_digits=20,
        decimal_places=15,
        required=False,
        min_value=Decimal("0"),
        max_value=Decimal("0.001"),
        widget=DECIMAL_INPUT,
        help_text="Only range counts spend δ. Leave empty for 0.",
    )


class SecondApproverForm(forms.Form):
    second_approver = forms.CharField(
        label="Second approver (user name)",
        required=False,
        max_length=150,
        help_text="An auditor of this dataset or another custodian, who must approve every "
        "analyst's request after you (the two-person rule). Leave empty to decide alone.",
    )


class RequestForm(ReleaseForm):
    """The new-release form for an analyst: the same kinds, settings, checks and dry run,
    with ε suggested from (and spent from) the allotment, and a purpose for the owner."""

    purpose = DisplayTextField(
        label="What is the release for? (the owner reads this)",
        required=False,
        multiline=True,
        max_length=NOTE_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
    )

    def __init__(self, *args, analyst, available=None, **kwargs):
        """`available`: the ε the analyst can still ask for (allotment less waiting requests)."""
        super().__init__(*args, dataset=analyst.dataset, **kwargs)
        self.analyst = analyst
        self.fields["epsilon"].initial = suggested_epsilon(
            analyst.epsilon_held if available is None else available
        )
        self.fields["epsilon"].help_text = (
            "Smaller means stronger protection and noisier results. It is spent from your "
            "allotment only when the owner approves the request."
        )

    def _dry_run(self):
        """As the owner's form; where the row count is private (add-remove, a person column)
        the mechanism's reason may quote figures derived from it, so the analyst gets words
        without them."""
        super()._dry_run()
        if self.errors.get("__all__") and not row_count_is_public(self.dataset):
            self.errors["__all__"] = self.error_class([PRIVATE_ROW_COUNT])

    def request_fields(self) -> dict:
        """What `services.request_submit` needs from the cleaned form (page and API alike)."""
        return self.release_fields() | {"purpose": self.cleaned_data.get("purpose", "")}


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(
        label="Your decision",
        widget=forms.RadioSelect,
        choices=[
            ("approve", "Approve: make the release, spending from the analyst's allotment"),
            ("decline", "Decline: nothing is spent"),
        ],
    )
    note = DisplayTextField(
        label="Note (the analyst and the auditors read it)",
        required=False,
        multiline=True,
        max_length=NOTE_LENGTH,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
