"""Forms of the dataset pages: upload with budget, budget change, schema, auditors, deletion."""

from decimal import Decimal
from typing import cast

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator

from dpportal.core.form_fields import DisplayTextField, PlainDecimalField, choice_field
from dpportal.models import Neighbouring

HEADER_CHOICES = [
    ("auto", "Detect automatically"),
    ("yes", "Yes, the first line holds the column names"),
    ("no", "No, the first line is data (columns get named column_1, column_2, ...)"),
]
HEADER_VALUES = {"auto": None, "yes": True, "no": False}
TYPE_CHOICES = [
    ("numeric", "Numeric"),
    ("date", "Date or time"),
    ("categorical", "Categorical"),
    ("ignored", "Ignored"),
]
UNKNOWN_CHOICES = [("other", 'Group as "(other)"'), ("reject", "Stop the release")]
MISSING_CHOICES = [
    ("cell", 'Own "(missing)" cell'),
    ("reject", "None allowed (refuse the data)"),
]
MATCH_CHOICES = [
    ("casefold", "Ignore capitals and spaces"),
    ("exact", "Exactly as written"),
]
PART_CHOICES = [
    ("", "Choose what to release"),
    ("year", "Year"),
    ("month", "Month (1-12)"),
    ("weekday", "Weekday (1 = Monday)"),
    ("hour", "Hour (0-23)"),
    ("date", "Date range (bounds are dates)"),
]
FIXED_PARTS = {"month", "weekday", "hour"}
MAX_BINS = 1000
DEFAULT_BINS = 10  # a numeric column's equal-width bins when Bins is left empty (public)
REQUIRED_HOW = {
    "lower": "enter the smallest value any row could have, from public knowledge, e.g. 0",
    "upper": "enter the largest value any row could have, from public knowledge, e.g. 100",
    "part": "choose what to release of the date (year, month, weekday, hour or a date range)",
    "first_date": "enter the first possible date, YYYY-MM-DD",
    "last_date": "enter the last possible date, YYYY-MM-DD",
}
MAX_DESCRIPTION_CHARACTERS = 5000


def epsilon_field(**kwargs):
    return PlainDecimalField(
        label="Total privacy budget ε (epsilon)",
        max_digits=12,
        decimal_places=6,
        validators=[MinValueValidator(Decimal("0.000001")), MaxValueValidator(Decimal("100"))],
        help_text="Shared by every release of this dataset. Smaller is more private.",
        **kwargs,
    )


def delta_field(**kwargs):
    return PlainDecimalField(
        label="Total δ (delta), optional",
        max_digits=20,
        decimal_places=15,
        initial=0,
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("0.001"))],
        help_text="δ is the tiny chance that the ε guarantee does not hold, shared by all "
        "releases. δ = 0 keeps every release purely ε-private but switches off what needs δ: "
        "finding categories for you on the schema page, range counts with Gaussian noise "
        "(often less error) and the halfspace decomposition. To keep them, use a tiny value "
        "such as 0.000001, well below 1 / rows. δ can be raised until the first release or "
        "estimate; after that the budget can only be lowered.",
        **kwargs,
    )


def neighbouring_field(**kwargs):
    return forms.ChoiceField(
        label="What does the guarantee protect?",
        choices=Neighbouring.choices,
        widget=forms.RadioSelect,
        initial=Neighbouring.REPLACE_ONE,
        **kwargs,
    )


class DatasetUploadForm(forms.Form):
    name = DisplayTextField(
        label="Name", max_length=200, help_text="A short name your colleagues will recognise."
    )
    description = DisplayTextField(
        label="Description (optional)",
        required=False,
        multiline=True,
        max_length=MAX_DESCRIPTION_CHARACTERS,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    file = forms.FileField(
        label="Table file",
        error_messages={
            "empty": "The file is empty; upload a table with column names in its first line.",
            "required": "Choose the file to upload.",
        },
    )
    header = forms.ChoiceField(
        label="Does the first line hold the column names?", choices=HEADER_CHOICES, initial="auto"
    )
    epsilon_total = epsilon_field(initial=Decimal("1"))
    delta_total = delta_field()
    neighbouring = neighbouring_field()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        limit_mb = settings.MAX_UPLOAD_BYTES / (1024 * 1024)
        self.fields["file"].help_text = (
            f"CSV, TSV or Excel (.xlsx), up to {limit_mb:g} MB, also compressed: .csv.gz, .tsv.gz "
            "or a .zip holding one table (at most the same size once unpacked). Text files may be "
            "UTF-8 or Latin-1."
        )
        self.fields["file"].widget.attrs.update(
            {"accept": ".csv,.tsv,.txt,.xlsx,.gz,.zip", "data-max-bytes": settings.MAX_UPLOAD_BYTES}
        )

    @property
    def header_choice(self):
        return HEADER_VALUES[self.cleaned_data["header"]]


class BudgetForm(forms.Form):
    epsilon_total = epsilon_field()
    delta_total = delta_field()
    neighbouring = neighbouring_field()


class PublicKnowledgeForm(forms.Form):
    """The owner's statement, required to confirm a schema, that it is public knowledge."""

    public_knowledge = forms.BooleanField(
        label="These bounds and categories come from public knowledge (e.g. a code book) or "
        "from DP estimates, not from looking at the data",
        error_messages={
            "required": "Nothing was saved: tick the box to confirm that these "
            "bounds and categories come from public knowledge, or "
            "replace those that do not first."
        },
    )


class AuditorForm(forms.Form):
    username = forms.CharField(label="Username", max_length=150)


class DeleteForm(forms.Form):
    confirm_name = forms.CharField(label="Type the dataset's name to confirm", max_length=200)

    def __init__(self, *args, dataset, **kwargs):
        super().__init__(*args, **kwargs)
        self.dataset = dataset

    def clean_confirm_name(self):
        value = self.cleaned_data["confirm_name"]
        if value.strip() != self.dataset.name.strip():
            raise forms.ValidationError(f"That is not the dataset's name ({self.dataset.name}).")
        return value


class SchemaColumnForm(forms.Form):
    """One column of the schema: a type and, depending on it, bounds and bins or categories.

    Every used column also says what its missing values become ("missing"); a numeric column
    whether it holds whole numbers ("integer") and otherwise its precision ("decimals"); a
    date column which derived part it releases ("part"), with date bounds for a date range.
    """

    type = forms.ChoiceField(label="Type", choices=TYPE_CHOICES)
    missing = forms.ChoiceField(
        label="Missing (empty) values", choices=MISSING_CHOICES, required=False
    )
    integer = forms.BooleanField(label="Whole numbers", required=False)
    decimals = forms.IntegerField(
        label="Decimals in synthetic values",
        required=False,
        min_value=0,
        max_value=12,
        widget=forms.NumberInput(attrs={"size": 3}),
        help_text="Leave empty for two more digits than the narrowest bin needs.",
    )
    part = forms.ChoiceField(label="Release as", choices=PART_CHOICES, required=False)
    first_date = forms.DateField(label="First date", required=False)
    last_date = forms.DateField(label="Last date", required=False)
    lower = forms.FloatField(label="Lower bound", required=False)
    upper = forms.FloatField(label="Upper bound", required=False)
    bins = forms.CharField(
        label="Bins",
        required=False,
        max_length=2000,
        widget=forms.TextInput(attrs={"size": 8}),
        help_text="A number of equal-width bins, or the bin edges from lower "
        f"to upper separated by commas (0, 18, 65, 120). Empty: {DEFAULT_BINS} equal-width bins "
        "(whole numbers: one bin per value up to 31 values).",
    )
    categories = forms.CharField(
        label="Categories, one per line", required=False, widget=forms.Textarea(attrs={"rows": 4})
    )
    unknown = forms.ChoiceField(
        label="Values not in the list", choices=UNKNOWN_CHOICES, required=False
    )
    match = forms.ChoiceField(
        label="Capitals and spaces",
        choices=MATCH_CHOICES,
        required=False,
        help_text="Ignoring them, the data's female, FEMALE and ' Female ' all count as the "
        "listed Female (releases keep the listed spelling).",
    )

    def __init__(self, *args, stays_where_it_lives=False, column_name=None, **kwargs):
        """`stays_where_it_lives`: a source, which may change after any check, so no rule may
        refuse its values (`Schema.accepting`): "reject" is not offered, nor ignoring capitals
        (its database compares texts exactly: `mechanisms.counting.sql`). `column_name`: the
        column every error message names (the schema page's rows)."""
        super().__init__(*args, **kwargs)
        self.column_name = column_name
        if stays_where_it_lives:
            for name, offered in (("unknown", UNKNOWN_CHOICES), ("missing", MISSING_CHOICES)):
                choice_field(self, name).choices = [c for c in offered if c[0] != "reject"]
            choice_field(self, "match").choices = [c for c in MATCH_CHOICES if c[0] == "exact"]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        kind = data.get("type")
        if kind == "numeric":
            self._clean_numeric(data)
        elif kind == "date":
            self._clean_date(data)
        elif kind == "categorical":
            self._clean_categorical(data)
        self._name_errors()
        return data

    def _name_errors(self):
        """Every message names the column (when known) and the field it is about."""
        if self.column_name is None:
            return
        prefix = f"Column {self.column_name!r}"
        for name, errors in list(self.errors.items()):
            label = str(self.fields[name].label) if name in self.fields else ""
            named: list[str | Exception] = []
            for error in errors:
                m = str(error)
                if not m.startswith(prefix):
                    m = prefix + (f", {label}: " if label and not m.startswith(label) else ": ") + m
                named.append(m)
            self.errors[name] = self.error_class(named, renderer=self.renderer)

    def _required(self, name, kind):
        """`name` is empty but a `kind` column needs it: say which field and how to fill it."""
        if name not in self.errors:
            how = REQUIRED_HOW.get(name, "fill it in")
            self.add_error(
                name,
                f"{self.fields[name].label} is required for a {kind} column — {how}.",
            )

    def _clean_numeric(self, data):
        lower, upper, bins = data.get("lower"), data.get("upper"), data.get("bins")
        integer = data.get("integer") or data.get("type") == "date"
        kind = "date (year)" if data.get("type") == "date" else "numeric"
        for name, value in (("lower", lower), ("upper", upper)):
            if value is None:
                self._required(name, kind)
        if lower is not None and upper is not None and not lower < upper:
            self.add_error(
                "upper", f"The upper bound ({upper:g}) must be above the lower bound ({lower:g})."
            )
        if integer:
            for name, value in (("lower", lower), ("upper", upper)):
                if value is not None and not float(value).is_integer():
                    self.add_error(name, f"A whole number is needed here, not {value:g}.")
        if bins and "bins" not in self.errors:
            try:  # whole-number edges may end at upper or upper + 1: the schema checks them
                data["bins"] = parse_bins(bins, None if integer else lower, upper)
            except ValueError as exc:
                self.add_error("bins", str(exc))

    def _clean_date(self, data):
        part = data.get("part")
        if not part:
            self._required("part", "date")
        elif part == "year":
            self._clean_numeric(data)
        elif part == "date":
            first, last = data.get("first_date"), data.get("last_date")
            for name, value in (("first_date", first), ("last_date", last)):
                if value is None:
                    self._required(name, "date range")
            if first and last and not first < last:
                self.add_error("last_date", "The last date must be after the first date.")
            self._clean_date_bins(data)
        else:
            self._clean_date_bins(data)

    def _clean_date_bins(self, data):
        bins = (data.get("bins") or "").strip()
        if bins and not (bins.isdigit() and 1 <= int(bins) <= MAX_BINS):
            self.add_error("bins", f"Bins ({bins}) must be a whole number from 1 to {MAX_BINS}.")
        elif bins:
            data["bins"] = int(bins)

    def _clean_categorical(self, data):
        categories = category_list(data.get("categories", ""))
        if not categories:
            self.add_error("categories", "List at least one category, one per line.")
        key = (lambda c: c.casefold()) if data.get("match") == "casefold" else (lambda c: c)
        keys = [key(c) for c in categories]
        duplicates = sorted({c for c, k in zip(categories, keys, strict=True) if keys.count(k) > 1})
        if duplicates:
            self.add_error(
                "categories", f"Each category must appear once; repeated: {', '.join(duplicates)}."
            )
        if "(other)" in categories:
            self.add_error("categories", '"(other)" is reserved for values not in the list.')
        data["category_list"] = categories

    def schema_entry(self, name: str) -> dict:
        data = self.cleaned_data
        missing = data.get("missing") or "cell"
        if data["type"] == "numeric":
            entry = {
                "name": name,
                "type": "numeric",
                "lower": _number(data["lower"]),
                "upper": _number(data["upper"]),
                "missing": missing,
                "integer": bool(data.get("integer")),
            }
            if data.get("bins"):
                entry["bins"] = data["bins"]
            elif not entry["integer"]:  # whole numbers have their own default (mechanisms.schema)
                entry["bins"] = DEFAULT_BINS
            if data.get("decimals") is not None and not entry["integer"]:
                entry["decimals"] = data["decimals"]
            return entry
        if data["type"] == "date":
            return self._date_entry(name, data, missing)
        if data["type"] == "categorical":
            entry = {
                "name": name,
                "type": "categorical",
                "categories": data["category_list"],
                "unknown": data.get("unknown") or "other",
                "missing": missing,
            }
            return entry | ({"match": "casefold"} if data.get("match") == "casefold" else {})
        return {"name": name, "type": "ignored"}

    @staticmethod
    def _date_entry(name, data, missing) -> dict:
        entry = {"name": name, "type": "date", "part": data["part"], "missing": missing}
        if data["part"] == "date":
            entry |= {
                "lower": data["first_date"].isoformat(),
                "upper": data["last_date"].isoformat(),
            }
        else:  # a year needs both bounds (checked above); a month, weekday or hour may narrow
            entry |= {k: _number(data[k]) for k in ("lower", "upper") if data.get(k) is not None}
        if data.get("bins"):
            entry["bins"] = data["bins"]
        return entry


def parse_bins(text: str, lower, upper):
    """A bin count ("10") or explicit edges ("0, 18, 65, 120") from lower to upper."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 1:
        if not parts[0].isdigit() or not 1 <= int(parts[0]) <= MAX_BINS:
            raise ValueError(
                f"Bins ({text}) must be a whole number from 1 to {MAX_BINS}, or "
                "edges separated by commas."
            )
        return int(parts[0])
    try:
        edges = [_number(float(p)) for p in parts]
    except ValueError:
        raise ValueError(f"Bin edges ({text}) must be numbers separated by commas.") from None
    if len(edges) - 1 > MAX_BINS or any(a >= b for a, b in zip(edges, edges[1:], strict=False)):
        raise ValueError(f"Bin edges ({text}) must increase, with at most {MAX_BINS} bins.")
    if lower is not None and upper is not None and (edges[0] != lower or edges[-1] != upper):
        raise ValueError(
            f"Bin edges ({text}) must start at the lower bound ({lower:g}) and end "
            f"at the upper bound ({upper:g})."
        )
    return edges


def category_list(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _number(value):
    return int(value) if float(value).is_integer() else value


class NamedColumnFormSet(forms.BaseFormSet):
    """Each form knows its column's name (`column_names`), so its errors name it."""

    def __init__(self, *args, column_names=(), **kwargs):
        self.column_names = list(column_names)
        super().__init__(*args, **kwargs)

    def get_form_kwargs(self, index):
        kwargs = super().get_form_kwargs(index)
        if index is not None and index < len(self.column_names):
            kwargs["column_name"] = self.column_names[index]
        return kwargs


SchemaFormSet = cast(
    type[NamedColumnFormSet],
    forms.formset_factory(
        SchemaColumnForm, formset=NamedColumnFormSet, extra=0, min_num=1, validate_min=True
    ),
)


def schema_formset(data, initial, dataset):
    """The schema page's formset; a source's columns offer no "reject" rule."""
    kwargs = {"stays_where_it_lives": dataset.is_external}
    return SchemaFormSet(
        data, initial=initial, form_kwargs=kwargs, column_names=list(dataset.columns)
    )


def schema_initial(entry: dict, match: str = "exact") -> dict:
    """Form values for a schema entry (confirmed schema or proposal); `match`: the comparison
    of categories when the entry does not say (a stored schema without it compares exactly)."""
    initial = {
        "type": entry.get("type", "ignored"),
        "match": entry.get("match", match),
        "unknown": entry.get("unknown", "other"),
        "missing": entry.get("missing", "cell"),
        "integer": bool(entry.get("integer")),
        "decimals": entry.get("decimals"),
        "part": entry.get("part", ""),
    }
    bins = entry.get("bins")
    if bins is not None:
        initial["bins"] = (
            bins if isinstance(bins, int) else ", ".join(f"{_number(e)}" for e in bins)
        )
    if entry.get("type") == "numeric" or entry.get("part") == "year":
        initial |= {  # a proposal has no bounds until the custodian or a DP estimate gives them
            key: _number(entry[key]) for key in ("lower", "upper") if entry.get(key) is not None
        }
    if entry.get("part") == "date":
        initial |= {"first_date": entry.get("lower"), "last_date": entry.get("upper")}
    if entry.get("part") in FIXED_PARTS:
        initial |= {"lower": entry.get("lower"), "upper": entry.get("upper")}
    if entry.get("type") == "categorical":
        initial["categories"] = "\n".join(str(c) for c in entry.get("categories", []))
    return initial
