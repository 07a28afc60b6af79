"""The schema page's person question: can one person have several rows, and at most how many.

The answer becomes the schema's `{"name": ..., "role": "person_id"}` column and its top-level
`max_rows_per_person` (mechanisms.persons): releases then protect all rows of one person.
"""

from django import forms

from dpportal.core.form_fields import choice_field
from mechanisms.persons import MAX_ROWS_LIMIT, PERSON_ROLE

NO_PERSON = ""
K_HELP = (
    "Rows beyond this number are left out at random, for each person, before every release. "
    "Noise grows with this number (twice the rows per person, twice the noise), while a "
    "number below what most people have leaves out many rows. Choose what a typical person "
    "stays within, from what you know of how the data were collected (for example 1 visit a "
    "week for 4 weeks: 4), not from the table."
)


class PersonForm(forms.Form):
    """The person column (or none: each row is a different person) and k."""

    person_column = forms.ChoiceField(
        label="Can one person appear in several rows? Which column identifies them?",
        required=False,
    )
    max_rows_per_person = forms.IntegerField(
        label="At most how many rows of one person should a release use?",
        min_value=1,
        max_value=MAX_ROWS_LIMIT,
        required=False,
        help_text=K_HELP,
    )

    def __init__(self, *args, columns, **kwargs):
        super().__init__(*args, **kwargs)
        choice_field(self, "person_column").choices = [
            (NO_PERSON, "No: each row is a different person"),
            *[(c, f"Yes: the column {c}") for c in columns],
        ]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if data.get("person_column") and not data.get("max_rows_per_person"):
            if "max_rows_per_person" not in self.errors:
                self.add_error(
                    "max_rows_per_person",
                    "Give the most rows one person may contribute (a whole number, 1 or more).",
                )
        return data

    def apply(self, schema: dict) -> dict:
        """The schema with the chosen column as the person column (never released) and k."""
        column = self.cleaned_data.get("person_column")
        if not column:
            return schema
        entries = [
            {"name": column, "role": PERSON_ROLE} if e["name"] == column else e
            for e in schema["columns"]
        ]
        return {"columns": entries, "max_rows_per_person": self.cleaned_data["max_rows_per_person"]}


def person_initial(schema: dict | None) -> dict:
    """The form's values for a confirmed schema (none if it has no person column)."""
    schema = schema or {}
    for entry in schema.get("columns", []):
        if entry.get("role") == PERSON_ROLE:
            return {
                "person_column": entry["name"],
                "max_rows_per_person": schema.get("max_rows_per_person"),
            }
    return {}


def person_form(data, dataset, estimated: dict | None = None) -> PersonForm:
    """The schema page's person question, showing the confirmed answer if there is one, else
    the answer the latest DP estimate used (`estimated`: its person column and k)."""
    confirmed = dataset.schema if dataset.schema_confirmed else None
    initial = person_initial(confirmed) or dict(estimated or {})
    return PersonForm(data, columns=dataset.columns, initial=initial)


def person_detail(schema: dict) -> str:
    """The dataset page's description of the person column."""
    k = schema.get("max_rows_per_person")
    return f"identifies a person (at most {k} rows each are used); never released"
