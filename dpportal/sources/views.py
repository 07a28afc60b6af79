"""The page "Register a table that stays where it lives": a Parquet file or folder (a path in
one of the custodian's folders of DPPORTAL_SOURCE_ROOTS, or an s3:// URL) or a PostgreSQL table
or view, on a host the operator allows (DPPORTAL_SOURCE_HOSTS; `dpportal.sources.reach`), or a
table in the Spark catalog the operator lists for the custodian (DPPORTAL_SPARK_TABLES).

Passwords and keys typed here are never rendered back: a password field stays empty after a
refusal, and a password inside the URL is masked in the re-rendered form.
"""

from decimal import Decimal
from urllib.parse import quote, urlsplit, urlunsplit

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from dpportal import services
from dpportal.core.form_fields import DisplayTextField
from dpportal.core.formatting import plain_number
from dpportal.datasets.forms import delta_field, epsilon_field, neighbouring_field
from dpportal.signals import client_address
from dpportal.sources.reach import spark_tables_of
from mechanisms.counting.source import SPARK_TABLE_SCHEME

ENGINE_CHOICES = [
    ("", "The usual one for this source (PostgreSQL: inside the database; Parquet: in-process)"),
    ("inprocess", "In-process: the portal's worker reads the rows in batches and counts them"),
    ("duckdb", "DuckDB: counts Parquet files with a query engine"),
    ("postgres", "PostgreSQL: GROUP BY inside the database, no row leaves it"),
    ("dask", "Dask: counts Parquet files in parallel partitions"),
    ("spark", "Spark: counts Parquet files or a catalog table on the Spark cluster, one query"),
]


def without_password(url: str) -> str:
    """`url` with any password removed (for re-rendering a refused form)."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = f"{parts.username}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def with_password(url: str, password: str) -> str:
    """A PostgreSQL URL with the password typed in its own field put in."""
    parts = urlsplit(url)
    if not password or not parts.hostname:
        return url
    user = quote(parts.username or "", safe="")
    netloc = f"{user}:{quote(password, safe='')}@{parts.hostname}"
    return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


class MaskedUrlInput(forms.TextInput):
    """A text box that never renders a password held in the URL it shows."""

    def format_value(self, value):
        try:
            return without_password(str(value)) if value else value
        except ValueError:  # an unreadable URL (a bad port): shown without its user part
            return str(value).rsplit("@", 1)[-1]


class SourceForm(forms.Form):
    name = DisplayTextField(
        label="Name", max_length=200, help_text="A short name your colleagues will recognise."
    )
    description = DisplayTextField(
        label="Description (optional)",
        required=False,
        multiline=True,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    location = forms.CharField(
        label="Where the table lives",
        max_length=2000,
        widget=MaskedUrlInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
        help_text="A Parquet file or folder in your folder on this server (a path relative "
        "to it, or absolute), an s3://bucket/path URL, or a PostgreSQL URL such as "
        "postgresql://reader@db.example.org:5432/census; servers and endpoints only on the "
        "hosts the administrator allows. A table in the Spark catalog: spark-table:db.table, "
        "for the tables the administrator lists for you.",
    )
    table = forms.CharField(
        label="PostgreSQL table or view (schema.table)",
        required=False,
        max_length=200,
        help_text="Only for a PostgreSQL URL: for example public.people.",
    )
    password = forms.CharField(
        label="Database password (optional)",
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted; shown to nobody, not even you.",
    )
    endpoint_url = forms.CharField(
        label="Object storage endpoint (s3:// only, optional)", required=False, max_length=500
    )
    access_key = forms.CharField(
        label="Access key (s3:// only)",
        required=False,
        max_length=200,
        help_text="Without keys the objects are read anonymously (a public bucket).",
    )
    secret_key = forms.CharField(
        label="Secret key (s3:// only)",
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    engine = forms.ChoiceField(
        label="Where releases count the rows",
        choices=ENGINE_CHOICES,
        required=False,
        help_text="Each release may choose another; only engines that can read the source work.",
    )
    epsilon_total = epsilon_field(initial=Decimal("1"))
    delta_total = delta_field()
    neighbouring = neighbouring_field()

    def __init__(self, *args, spark_tables=(), **kwargs):
        """`spark_tables`: the catalog tables this custodian may register, named in the help."""
        super().__init__(*args, **kwargs)
        if spark_tables:
            listed = ", ".join(SPARK_TABLE_SCHEME + name for name in spark_tables)
            self.fields["location"].help_text += f" Yours: {listed}."

    def source_fields(self) -> dict:
        """What `services.dataset_register_source` needs from the cleaned form."""
        data = self.cleaned_data
        options = {k: data[k] for k in ("endpoint_url", "access_key", "secret_key") if data[k]}
        try:
            location = with_password(data["location"].strip(), data["password"])
        except ValueError:
            raise services.ServiceError("The URL is not valid: check its port.") from None
        return {
            "name": data["name"],
            "description": data["description"],
            "location": location,
            "table": data["table"],
            "storage_options": options,
            "engine": data["engine"],
            "epsilon_total": data["epsilon_total"],
            "delta_total": data["delta_total"],
            "neighbouring": data["neighbouring"],
        }


def shared_source_text(dataset) -> str:
    """What the owner must know when this source was registered before in the budget's scope."""
    earlier = services.dataset_shared_with(dataset)
    if earlier is None:
        return ""
    state = "since deleted" if earlier.is_deleted else "not deleted"
    return (
        f"This is the same data as “{earlier.name}” (registered {earlier.created_at:%Y-%m-%d}, "
        f"{state}): it shares that dataset's privacy budget and ledger, ε spent so far "
        f"{plain_number(dataset.epsilon_spent)} of {plain_number(dataset.epsilon_total)}."
    )


@require_http_methods(["GET", "POST"])
def dataset_register_source(request):
    spark_tables = spark_tables_of(request.user.get_username())
    form = SourceForm(request.POST or None, spark_tables=spark_tables)
    if request.method == "POST" and form.is_valid():
        try:
            dataset = services.dataset_register_source(
                owner=request.user, **form.source_fields(), remote_addr=client_address(request)
            )
        except services.ServiceError as exc:
            form.add_error("location", str(exc))
        else:
            shared = shared_source_text(dataset)
            if shared:
                messages.warning(request, shared)
            messages.success(
                request,
                f"{dataset.name} is registered: {len(dataset.columns)} columns; the data stays "
                "where it lives. Next, confirm its schema.",
            )
            return redirect("dataset_schema", pk=dataset.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "dpportal/sources/register.html", {"form": form, "nav": "datasets"}, status=status
    )
