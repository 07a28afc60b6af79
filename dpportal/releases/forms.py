"""The new-release form: mechanism, columns, privacy parameters and mechanism settings.

Every choice comes from public information (the confirmed schema and the custodian's input).
No field accepts a random seed: releases always use the secure, unseeded noise source.
"""

import math
import secrets
from decimal import Decimal

from django import forms
from django.core import signing

import mechanisms
from dpportal.access.rules import row_count_is_public
from dpportal.releases import catalogue
from dpportal.releases import engine as release_engine
from dpportal.releases.catalogue import DECIMAL_INPUT, WHOLE_NUMBER_INPUT
from dpportal.releases.kinds.statistics import portal as statistics_portal
from dpportal.sources import tables as sources
from mechanisms import workload as mwem_workload
from mechanisms.plans import smoothed_default_rows
from mechanisms.range_count.grid_choice import suggest_grid

MAX_SYNTHETIC_ROWS = 1_000_000
# Text boxes with a numeric keyboard rather than type=number (catalogue.DECIMAL_INPUT): Chromium
# scrolls the page when a number box loses focus, which can move the submit button away from
# under the pointer.
RANGE_WORKLOADS = (
    (
        "prefixes",
        "Intervals from the lower bound up to every grid point (with one column, any "
        "interval is the difference of two of these)",
    ),
    ("boxes", "Random boxes (random intervals with one column)"),
    ("halfspaces", "Random regions on one side of a straight line (two or more columns)"),
)
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
    rows = forms.IntegerField(
        label="Rows to synthesise",
        required=False,
        min_value=1,
        max_value=MAX_SYNTHETIC_ROWS,
        help_text="How many made-up rows synthetic.csv should have. Leave empty for as many "
        "as the table has (or, if the number of rows is private, its noisy estimate).",
        widget=WHOLE_NUMBER_INPUT,
    )
    mwem_rounds = forms.IntegerField(
        label="MWEM rounds",
        required=False,
        min_value=1,
        max_value=200,
        help_text="Each round measures one more pattern. More rounds: more patterns, each "
        "noisier. Leave empty to choose automatically.",
        widget=WHOLE_NUMBER_INPUT,
    )
    mwem_marginal_size = forms.TypedChoiceField(
        label="Patterns to keep",
        coerce=int,
        initial=2,
        required=False,
        empty_value=2,  # type: ignore[arg-type]  # returned as is when empty; the stubs want str
        choices=[(1, "Each column on its own"), (2, "Pairs of columns"), (3, "Triples of columns")],
    )
    range_grid = forms.IntegerField(
        label="Grid points per column",
        required=False,
        min_value=2,
        max_value=4096,
        help_text="Values are rounded to a regular grid between the schema's bounds. "
        "Leave empty for a grid fine enough that rounding is small against the noise at "
        "this ε (when the number of rows is public; otherwise the schema's bins).",
        widget=WHOLE_NUMBER_INPUT,
    )
    range_workload = forms.ChoiceField(
        label="Ranges to answer", choices=RANGE_WORKLOADS, initial="prefixes", required=False
    )
    range_queries = forms.IntegerField(
        label="Number of random ranges",
        required=False,
        min_value=1,
        max_value=2000,
        initial=200,
        help_text="For random boxes and regions cut by a line. The ranges are "
        "drawn at random, without looking at the data.",
        widget=WHOLE_NUMBER_INPUT,
    )
    range_method = forms.ChoiceField(
        label="Method", choices=catalogue.range_method_choices, initial="auto", required=False
    )

    def __init__(self, *args, dataset, user=None, **kwargs):
        """With `user` (the form that spends), a submission needs a one-time token issued to
        that user for this dataset; every rendering carries a fresh one (`next_submission`).
        Without (the accuracy preview), no token is read."""
        super().__init__(*args, **kwargs)
        self.dataset, self.user = dataset, user
        self.next_submission = submission_token(user, dataset) if user is not None else ""
        self.fields["epsilon"].initial = suggested_epsilon(dataset.epsilon_remaining)
        self.schema = mechanisms.Schema.from_dict(dataset.schema)
        self.fields.update(catalogue.generic_fields())
        self.fields.update(statistics_portal.form_fields())
        self.fields["mechanism"].choices = [(c.name, c.title) for c in catalogue.cards()]
        self.fields["mechanism"].initial = next(iter(self.fields["mechanism"].choices), ("",))[0]
        self.fields["columns"].choices = [
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
        data = super().clean()
        if self.user is not None:
            token = self.data.get("submission", "")
            data["submission"] = submission_nonce(token, self.user, self.dataset)
            if data["submission"] is None:
                self.add_error(None, SUBMISSION_REFUSED)
        mechanism, columns = data.get("mechanism"), data.get("columns")
        if data.get("delta") is None:
            data["delta"] = Decimal("0")
        data["range_workload"] = data.get("range_workload") or "prefixes"
        data["range_method"] = data.get("range_method") or "auto"
        if not catalogue.needs_delta(mechanism):
            data["delta"] = Decimal("0")
        if (
            mechanism in catalogue.NEEDS_PUBLIC_ROW_COUNT
            and self.dataset.neighbouring != "replace-one"
        ):
            self.add_error(
                "mechanism",
                "The smoothed histogram needs the number of rows to be "
                "public (neighbouring: replace one row); choose the "
                "noisy histogram instead.",
            )
        if mechanism and columns:
            self._check_domain(mechanism, columns)
        if mechanism and columns and data.get("epsilon") and not self.errors:
            self._dry_run()
        return data

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

    def _check_domain(self, mechanism, columns):
        if mechanism in catalogue.NEEDS_NUMERIC:
            self._check_range_count(columns)
            return
        if mechanism in catalogue.NO_CELL_DOMAIN:
            return
        try:
            self.schema.domain_shape(columns)
        except mechanisms.MechanismError as exc:
            self.add_error("columns", str(exc))

    def _check_range_count(self, columns):
        data = self.cleaned_data
        non_numeric = [c for c in columns if c not in self.numeric_columns()]
        if non_numeric:
            self.add_error(
                "columns",
                f"Range counts need numeric columns; {', '.join(non_numeric)} is categorical.",
            )
            return
        if data["range_workload"] == "halfspaces" and len(columns) < 2:
            self.add_error("columns", "Regions cut by a line need at least two columns.")
        if data["range_method"] in catalogue.NEEDS_DELTA_METHODS and not data.get("delta"):
            self.add_error("delta", "The halfspace decomposition needs δ > 0, such as 0.000001.")
        points = math.prod(self._range_grid(columns))
        if points > catalogue.RANGE_MAX_GRID_POINTS:
            self.add_error(
                "range_grid",
                f"The grid has {points:,} points; use at most "
                f"{catalogue.RANGE_MAX_GRID_POINTS:,} (fewer points per column).",
            )
        elif data["range_workload"] == "prefixes" and points > catalogue.RANGE_MAX_QUERIES:
            self.add_error(
                "range_grid",
                f"Intervals up to every grid point are {points:,} ranges here; at most "
                f"{catalogue.RANGE_MAX_QUERIES:,} can be answered: use fewer grid points per "
                "column, or random boxes.",
            )

    def _range_grid(self, columns) -> list[int]:
        """The typed size; else, when the row count is public (replace-one without a person
        column: `row_count_is_public`), the size that keeps rounding small against the noise at
        this ε (`grid_choice`); else the schema's bins. The grid is published in the manifest,
        so its default reads public facts only."""
        data = self.cleaned_data
        if data.get("range_grid"):
            return [data["range_grid"]] * len(columns)
        if not row_count_is_public(self.dataset) or not data.get("epsilon"):
            return [self.schema.column(c).n_bins for c in columns]  # no missing cell
        bounds = tuple((self.schema.column(c).lower, self.schema.column(c).upper) for c in columns)
        limit = catalogue.RANGE_MAX_GRID_POINTS
        if data.get("range_workload") == "prefixes":
            limit = catalogue.RANGE_MAX_QUERIES
        size = suggest_grid(
            bounds,
            float(data["epsilon"]),
            float(data.get("delta") or 0),
            "replace-one",
            max(self.dataset.row_count, 1),
            limit,
        )
        return [size] * len(columns)

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
        mechanism = data["mechanism"]
        params = catalogue.generic_params(mechanism, data)
        if mechanism in catalogue.ASKS_ROWS and data.get("rows"):
            params["rows"] = data["rows"]
        if mechanism == "smoothed_histogram" and "rows" not in params:
            cells = math.prod(self.schema.domain_shape(data["columns"]))
            params["rows"] = smoothed_default_rows(
                max(self.dataset.row_count, 1), cells, float(data["epsilon"])
            )
        if mechanism == "mwem":
            k = min(data.get("mwem_marginal_size") or 2, len(data["columns"]))
            params["workload"] = mwem_workload.marginals_spec(k)
            if data.get("mwem_rounds"):
                params["rounds"] = data["mwem_rounds"]
        if mechanism in catalogue.NEEDS_NUMERIC:
            params.update(self._range_params())
        if mechanism == statistics_portal.NAME:
            params.update(statistics_portal.params(self.schema, data["columns"], data))
        return params

    def _range_params(self) -> dict:
        data = self.cleaned_data
        params = {"grid": self._range_grid(data["columns"]), "mechanism": data["range_method"]}
        count = data.get("range_queries") or 200
        if data["range_workload"] == "prefixes":
            params["prefixes"] = True
        elif data["range_workload"] == "boxes":
            params["random_boxes"] = count
        else:
            params["random_halfspaces"] = count
        return params


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
