"""API endpoints of datasets: list and upload, detail, schema, accuracy preview, planner, ledger.

Each one is the page's logic over JSON: the same permission helpers (`access`), forms and
services. Auditors may read a dataset and its ledger; everything else is the owner's (others
get 404, exactly as for a dataset that does not exist).
"""

from django.conf import settings
from django.http import JsonResponse

from dpportal import services
from dpportal.access import timing
from dpportal.access.rules import (
    NOT_A_CUSTODIAN,
    dataset_for_owner,
    dataset_for_reader,
    datasets_visible_to,
    is_custodian,
    is_owner,
)
from dpportal.api.auth import ApiError, api_endpoint, form_data, form_errors, invalid, read_json
from dpportal.api.present import dataset_json, ledger_json
from dpportal.core.formatting import plain_number
from dpportal.core.storage import UPLOAD_FIELD, PrivateUploadHandler
from dpportal.datasets.forms import DatasetUploadForm, PublicKnowledgeForm, SchemaColumnForm
from dpportal.datasets.views import FORM_OVERHEAD_BYTES, shared_budget_text
from dpportal.releases.forms import ReleaseForm
from dpportal.releases.planner import TargetForm, proposals
from dpportal.releases.risk_words import preview_risk
from dpportal.signals import client_address

SCHEMA_FIELDS = ("name", "type", "lower", "upper", "bins", "categories", "unknown", "match")


@api_endpoint("GET", "POST")
def datasets(request):
    """GET: the datasets the token's user owns or audits. POST: upload a table (multipart)."""
    if request.method == "POST":
        return _upload(request)
    visible = datasets_visible_to(request.user).select_related("budget", "owner")
    return JsonResponse({"datasets": [dataset_json(d, request.user) for d in visible]})


def _upload(request):
    if not is_custodian(request.user):
        raise ApiError(403, NOT_A_CUSTODIAN)
    declared = int(request.META.get("CONTENT_LENGTH") or 0)
    if declared > settings.MAX_UPLOAD_BYTES + FORM_OVERHEAD_BYTES:
        raise ApiError(413, _too_large())
    handler = PrivateUploadHandler(request)
    request.upload_handlers = [handler]
    try:
        if not request.content_type.startswith("multipart/form-data"):
            raise ApiError(415, "Upload the table as multipart/form-data, the file in 'file'.")
        form = DatasetUploadForm(_with_page_defaults(request.POST), request.FILES)
        if handler.exceeded:
            raise ApiError(413, _too_large())
        if not form.is_valid():
            raise invalid(form)
        dataset = services.dataset_create_from_upload(
            owner=request.user,
            upload=request.FILES[UPLOAD_FIELD],
            name=form.cleaned_data["name"],
            description=form.cleaned_data["description"],
            epsilon_total=form.cleaned_data["epsilon_total"],
            delta_total=form.cleaned_data["delta_total"],
            neighbouring=form.cleaned_data["neighbouring"],
            header=form.header_choice,
            remote_addr=client_address(request),
        )
    finally:
        upload = request._files.get(UPLOAD_FIELD) if hasattr(request, "_files") else None
        if upload is not None:
            upload.discard()  # a no-op once the service kept or removed it
    data = dataset_json(dataset, request.user) | {"shared_budget": shared_budget_text(dataset)}
    response = JsonResponse(data, status=201)
    response["Location"] = data["url"]
    return response


def _with_page_defaults(posted):
    """Omitted fields take the value the upload page starts with (header "auto", δ 0,
    replace-one), so a script states only what it means to choose."""
    data = posted.copy()
    for name, field in DatasetUploadForm.base_fields.items():
        if name not in data and field.initial is not None and name != "epsilon_total":
            data[name] = str(field.initial)
    return data


def _too_large() -> str:
    limit_mb = settings.MAX_UPLOAD_BYTES / (1024 * 1024)
    return f"The file is larger than the limit of {limit_mb:g} MB; nothing was stored."


@api_endpoint("GET")
def dataset_detail(request, pk):
    return JsonResponse(dataset_json(dataset_for_reader(request.user, pk), request.user))


SCHEMA_STATEMENTS = ("public_knowledge", "accept_clamping")


@api_endpoint("GET", "POST")
def dataset_schema(request, pk):
    """GET: the confirmed schema, or the proposal from the data (owner only: the proposal is
    computed from the raw data and marks which values came from it). POST: confirm a schema."""
    dataset = dataset_for_owner(request.user, pk)
    if request.method == "GET":
        profile = dataset.profile or {}
        return JsonResponse(
            {
                "confirmed": dataset.schema_confirmed,
                "schema": dataset.schema if dataset.schema_confirmed else None,
                "proposal": profile.get("proposals", []),
                "read_as": profile.get("read_as"),
            }
        )
    data = read_json(request)
    others = {k: v for k, v in data.items() if k != "columns"}
    statement = PublicKnowledgeForm(form_data(others, ("columns", *SCHEMA_STATEMENTS)))
    schema = {"columns": _schema_columns(dataset, data.get("columns"))}
    if not statement.is_valid():
        raise invalid(statement)
    accept = data.get("accept_clamping", False)
    if not isinstance(accept, bool):
        raise ApiError(400, "accept_clamping: give true or false.")
    try:
        services.dataset_confirm_schema(
            dataset=dataset,
            user=request.user,
            schema=schema,
            remote_addr=client_address(request),
            accept_clamping=accept,
        )
    except services.ClampingNotAccepted as exc:
        raise _asked_again(dataset, exc.clamping) from None
    dataset.refresh_from_db()
    return JsonResponse(dataset_json(dataset, request.user))


def _asked_again(dataset, clamping: list[dict]) -> ApiError:
    """The schema page's question asked again (owner-only, as the page): the bounds or
    categories move a large share of these columns' values; nothing was saved."""
    index = {name: i for i, name in enumerate(dataset.columns)}
    return ApiError(
        400,
        "Not confirmed yet: the bounds or categories move a large share of the values of "
        f"{', '.join(repr(entry['column']) for entry in clamping)} (see errors: each column's "
        "share and likely cause). Correct them, or, if they are right, send the schema again "
        'with "accept_clamping": true. Nothing was saved.',
        {f"columns[{index[entry['column']]}]": [entry["message"]] for entry in clamping},
    )


def _schema_columns(dataset, columns) -> list[dict]:
    """Each column through the schema page's own form; errors named `columns[i].field`."""
    if not isinstance(columns, list) or len(columns) != len(dataset.columns):
        raise ApiError(
            400,
            f"Give 'columns' as a list of {len(dataset.columns)} objects, one per column in "
            f"order: {', '.join(dataset.columns)}.",
        )
    entries, errors = [], {}
    for i, (column, name) in enumerate(zip(columns, dataset.columns, strict=True)):
        if not isinstance(column, dict) or column.get("name") != name:
            errors[f"columns[{i}]"] = [f"Give an object whose name is {name!r}."]
            continue
        form = SchemaColumnForm(_column_form_data(column, i))
        if form.is_valid():
            entries.append(form.schema_entry(name))
        else:
            errors |= {f"columns[{i}].{k}": v for k, v in form_errors(form).items()}
    if errors:
        raise ApiError(400, "The schema is not valid; nothing was saved. See errors.", errors)
    return entries


def _column_form_data(column: dict, i: int) -> dict:
    form_data(column, SCHEMA_FIELDS)  # refuses unknown fields and values of the wrong kind
    data = {k: v for k, v in column.items() if k != "name" and v is not None}
    if isinstance(data.get("bins"), list):
        data["bins"] = ", ".join(str(edge) for edge in data["bins"])
    categories = data.get("categories")
    if isinstance(categories, list):
        if any(not isinstance(c, str) or "\n" in c or "\r" in c for c in categories):
            raise ApiError(
                400, f"columns[{i}].categories: give a list of texts without line breaks."
            )
        data["categories"] = "\n".join(categories)
    return {k: str(v) for k, v in data.items()}


@api_endpoint("GET")
def dataset_preview(request, pk):
    """Expected accuracy of a release with these settings, from public information only (the
    schema and the settings, never the raw data); nothing is spent."""
    dataset = dataset_for_owner(request.user, pk)
    if dataset.is_deleted or not dataset.schema_confirmed:
        raise ApiError(409, "Confirm the dataset's schema first (POST its schema).")
    form = ReleaseForm(request.GET, dataset=dataset)
    unknown = sorted(set(request.GET) - set(form.fields))
    if unknown:
        raise ApiError(400, f"Unknown parameter(s): {', '.join(unknown)}.")
    if not form.is_valid():
        raise invalid(form)
    epsilon_left = dataset.epsilon_remaining - form.cleaned_data["epsilon"]
    delta_left = dataset.delta_remaining - form.cleaned_data["delta"]
    return JsonResponse(
        {
            "accuracy": form.expected_accuracy,
            "epsilon_left": plain_number(epsilon_left),
            "delta_left": plain_number(delta_left),
            "fits": epsilon_left >= 0 and delta_left >= 0,
            "risk": preview_risk(dataset, form.cleaned_data["epsilon"], form.cleaned_data["delta"]),
        }
    )


@api_endpoint("GET")
def dataset_plan(request, pk):
    """The planner, as on the new-release form (`releases.planner.proposals`, the same code):
    for every kind of release with these settings, the ε whose promise reaches the accuracy
    asked (target_rows, or target_percent of a public row count), or why none does. Public
    information only; nothing is spent."""
    dataset = dataset_for_owner(request.user, pk)
    if dataset.is_deleted or not dataset.schema_confirmed:
        raise ApiError(409, "Confirm the dataset's schema first (POST its schema).")
    target = TargetForm(request.GET, dataset=dataset)
    settings_form = ReleaseForm(request.GET, dataset=dataset)
    unknown = sorted(set(request.GET) - set(target.fields) - set(settings_form.fields))
    if unknown:
        raise ApiError(400, f"Unknown parameter(s): {', '.join(unknown)}.")
    if not target.is_valid():
        raise invalid(target)
    return JsonResponse(
        {
            "target": target.cleaned_data["target"],
            "proposals": proposals(dataset, request.GET, target.cleaned_data["target"]),
            "epsilon_remaining": plain_number(dataset.epsilon_remaining),
        }
    )


@api_endpoint("GET")
def dataset_ledger(request, pk):
    """The budget ledger; auditors see entries on the minute, as on the ledger page."""
    dataset = dataset_for_reader(request.user, pk)
    exact = is_owner(request.user, dataset)
    entries = dataset.ledger.all()
    if not exact:
        entries = entries.filter(created_at__lt=timing.last_whole_minute())
    return JsonResponse(
        {
            "dataset": dataset.pk,
            "budget": dataset_json(dataset, request.user)["budget"],
            "entries": [ledger_json(e, exact=exact) for e in entries],
        }
    )
