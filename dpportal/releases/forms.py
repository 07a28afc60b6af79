"""The new-release form: mechanism, columns, privacy parameters and mechanism settings.

Every choice comes from public information (the confirmed schema and the custodian's input).
No field accepts a random seed: releases always use the secure, unseeded noise source.
"""

import secrets
from decimal import Decimal

from django import forms
from django.core import signing

import mechanisms
from dpportal.core.form_fields import DECIMAL_INPUT, choice_field
from dpportal.releases import catalogue
from dpportal.releases import engine as release_engine
from dpportal.releases.kinds import all_kinds, kind_of
from dpportal.sources import tables as sources

SUBMISSION_SALT = "dpportal.release-form.submission"
SUBMISSION_REFUSED = (
    "This form was not issued to you for this dataset, or it is incomplete; nothing was "
    "spent. Reload the page and submit it again."
)


def submission_token(user, dataset) -> str:
    """A one-time token for one rendering of the new-release form: a random nonce, signed
    together with the user and the dataset (so it cannot be forged or moved to another)."""
    nonce = secrets.token_urlsafe(32)
    return signing.dumps([user.pk, dataset.pk, nonce], salt=SUBMISSION_SALT)


def submission_nonce(token: str, user, dataset) -> str | None:
    """The nonce of a token issued to `user` for `dataset`, or None if it is missing or forged.
    The release stores the nonce, unique per dataset: a second POST of the form spends nothing."""
    try:
        user_pk, dataset_pk, nonce = signing.loads(token, salt=SUBMISSION_SALT)
    except (signing.BadSignature, TypeError, ValueError):
        return None
    if (user_pk, dataset_pk) != (user.pk, dataset.pk) or not isinstance(nonce, str):
        return None
    return nonce


def engine_field(dataset) -> forms.ChoiceField:
    """Where a release of a table that stays where it lives counts its rows (default: the
    dataset's engine)."""
    kind = sources.source_kind(dataset)
    return forms.ChoiceField(
        label="Where to count the rows",
        required=False,
        choices=[("", f"The dataset's engine ({dataset.engine})")]
        + [(name, name) for name in sources.engine_choices(kind)],
        help_text="The data stays where it lives; only the counts reach the portal.",
    )


class ReleaseForm(forms.Form):
    mechanism = forms.ChoiceField(widget=forms.RadioSelect, label="Kind of release")
    columns = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        label="Columns to release",
        help_text="Only columns declared numeric or categorical in the schema can be released.",
    )
    epsilon = forms.DecimalField(
        label="Privacy cost ε for this release",
        max_digits=12,
        decimal_places=6,
        min_value=Decimal("0.000001"),
        widget=DECIMAL_INPUT,
        help_text="Smaller means stronger protection and noisier results. It is taken from "
        "the dataset's budget.",
    )
    delta = forms.DecimalField(
        label="δ (range counts only)",
        max_digits=20,
        decimal_places=15,
        required=False,
        min_value=Decimal("0"),
        max_value=Decimal("0.001"),
        widget=DECIMAL_INPUT,
        help_text="A tiny chance that the guarantee does not hold, such as 0.000001. Leave "
        "empty for 0 (the guarantee always holds).",
    )

    confirm = forms.BooleanField(
        label="Spend anyway: I have read what the preview warns against",
        required=False,
        help_text="Needed only when the expected accuracy above warns that the release would "
        "be mostly noise.",
    )

    def __init__(self, *args, dataset, user=None, spends=False, **kwargs):
        """With `user` (the form that spends), a submission needs a one-time token issued to
        that user for this dataset; every rendering carries a fresh one (`next_submission`).
        Without (the accuracy preview), no token is read. `spends`: the form is the request to
        spend (the page's POST, the API's), so a release the preview warns against needs its
        `confirm` box ticked (`_check_confirmed`)."""
        super().__init__(*args, **kwargs)
        self.dataset, self.user, self.spends = dataset, user, spends
        self.next_submission = submission_token(user, dataset) if user is not None else ""
        self.fields["epsilon"].initial = suggested_epsilon(dataset.epsilon_remaining)
        self.schema = mechanisms.Schema.from_dict(dataset.schema)
        for kind in all_kinds():  # the settings of every kind (shared names: one field)
            self.fields.update(kind.form_fields())
        mechanism = choice_field(self, "mechanism")
        mechanism.choices = [(c.name, c.title) for c in catalogue.cards()]
        mechanism.initial = next(iter(mechanism.choices), ("",))[0]
        choice_field(self, "columns").choices = [
            (name, f"{name} ({_describe(spec)})") for name, spec in self.releasable_columns()
        ]
        if dataset.is_external:  # a table that stays where it lives: where to count it
            self.fields["engine"] = engine_field(dataset)

    def settings(self) -> list:
        """(legend, mechanism names, bound fields) for each fieldset of mechanism settings."""
        return [
            (legend, names, [self[name] for name in fields])
            for legend, names, fields in catalogue.settings_groups()
        ]

    def delta_for(self) -> str:
        """The mechanisms that ask for delta, space-separated (for the page's script)."""
        return " ".join(c.name for c in catalogue.cards() if c.needs_delta)

    def releasable_columns(self):
        releasable = mechanisms.schema.NumericColumn | mechanisms.schema.CategoricalColumn
        return [
            (name, spec)
            for name, spec in self.schema.columns.items()
            if isinstance(spec, releasable)
        ]

    def numeric_columns(self) -> set[str]:
        return {
            name
            for name, spec in self.releasable_columns()
            if isinstance(spec, mechanisms.schema.NumericColumn)
        }

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if self.user is not None:
            token = self.data.get("submission", "")
            data["submission"] = submission_nonce(token, self.user, self.dataset)
            if data["submission"] is None:
                self.add_error(None, SUBMISSION_REFUSED)
        mechanism, columns = data.get("mechanism"), data.get("columns")
        if data.get("delta") is None:
            data["delta"] = Decimal("0")
        if not mechanism or not catalogue.needs_delta(mechanism):
            data["delta"] = Decimal("0")
        if mechanism and (refusal := kind_of(mechanism).refusal(self.dataset)):
            self.add_error("mechanism", refusal)
        if mechanism and columns:
            kind_of(mechanism).check_columns(self, columns)
        if mechanism and columns and data.get("epsilon") and not self.errors:
            self._dry_run()
            self._check_confirmed()
        return data

    def warnings(self) -> list[str]:
        """What the dry run's preview warns against ([] before a dry run or without warnings)."""
        return getattr(self, "expected_accuracy", {}).get("warnings", [])

    def _check_confirmed(self):
        """A spend the preview warns against needs the `confirm` box ticked: the page's script
        shows the box with the warnings, and this check holds whatever sends the form."""
        warnings = self.warnings()
        if self.spends and warnings and not self.cleaned_data.get("confirm"):
            self.add_error(
                "confirm",
                "The expected accuracy warns: "
                + " ".join(warnings)
                + " Nothing was spent. To make this release as it is, tick “Spend anyway” (in "
                'the API, send "confirm": true); or change the settings.',
            )

    def _dry_run(self):
        """Plan the release on public inputs only, so settings the mechanism would refuse are
        caught here, before any budget is spent; keeps the accuracy estimate for the page."""
        data = self.cleaned_data
        try:
            self.expected_accuracy = release_engine.expected_accuracy(
                self.dataset,
                mechanism=data["mechanism"],
                columns=data["columns"],
                params=self.params(),
                epsilon=data["epsilon"],
                delta=data["delta"],
            )
        except mechanisms.MechanismError as exc:
            self.add_error(None, f"These settings cannot work: {exc}")
            return
        if self.dataset.is_external and (
            refusal := release_engine.engine_refusal(
                self.dataset,
                mechanism=data["mechanism"],
                columns=data["columns"],
                params=self.params(),
                epsilon=data["epsilon"],
                engine=data.get("engine") or self.dataset.engine,
            )
        ):
            self.add_error("engine" if "engine" in self.fields else None, refusal)

    def release_fields(self) -> dict:
        """What `services.release_create` needs from the cleaned form (page and API alike)."""
        data = self.cleaned_data
        return {
            "mechanism": data["mechanism"],
            "columns": data["columns"],
            "params": self.params(),
            "epsilon": data["epsilon"],
            "delta": data["delta"],
            "engine": data.get("engine", ""),
        }

    def params(self) -> dict:
        """The mechanism's parameters, from the cleaned form (defaults left to the mechanism)."""
        data = self.cleaned_data
        return kind_of(data["mechanism"]).params(self, data)


def suggested_epsilon(remaining: Decimal) -> Decimal | None:
    """A quarter of what is left, at most 1, rounded down to two significant digits."""
    if remaining <= 0:
        return None
    quarter = min(Decimal(1), remaining / 4)
    step = Decimal(1).scaleb(quarter.adjusted() - 1)
    return Decimal(f"{max((quarter // step) * step, Decimal('0.000001')).normalize():f}")


def _describe(spec) -> str:
    missing = " + (missing)" if spec.missing == "cell" else ""
    if isinstance(spec, mechanisms.schema.NumericColumn):
        kind = f"{spec.part} of a date" if spec.part else "numeric"
        bounds = spec.to_dict()
        return f"{kind}, {bounds['lower']} to {bounds['upper']}, {spec.n_bins} bins{missing}"
    other = " + (other)" if spec.unknown == "other" else ""
    return f"categorical, {len(spec.categories)} categories{other}{missing}"
