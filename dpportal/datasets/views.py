"""Dataset pages: upload, dataset summary, schema confirmation, budget, auditors, deletion.

Owners see everything here; auditors see the public parts of the dataset page (never the raw
data or the proposals computed from it); everyone else gets 404.
"""

import re

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST

import mechanisms
from dpportal import services
from dpportal.access.rules import dataset_for_owner, dataset_for_reader, is_owner
from dpportal.access.timing import shown_status
from dpportal.analysts.models import held_on_budget
from dpportal.core.formatting import plain_number
from dpportal.core.storage import UPLOAD_FIELD, PrivateUploadHandler
from dpportal.datasets.budget_views import same_people_form, shared_budget_text
from dpportal.datasets.forms import (
    AuditorForm,
    BudgetForm,
    DatasetUploadForm,
    DeleteForm,
    PublicKnowledgeForm,
    schema_formset,
    schema_initial,
)
from dpportal.datasets.person_forms import person_detail, person_form
from dpportal.datasets.publishing_views import publishing_form
from dpportal.datasets.schema_proposals import column_estimates, dp_estimate_offer, schema_entries
from dpportal.models import Release
from dpportal.signals import client_address

FORM_OVERHEAD_BYTES = 64 * 1024  # room for the text fields beside the file
NAME_BREAKS = re.compile(r"(?<=[_\-./])")


def url_or_none(name, **kwargs):
    """The URL if another part of the portal provides it yet, else None."""
    try:
        return reverse(name, kwargs=kwargs)
    except NoReverseMatch:
        return None


# ---------------------------------------------------------------- upload


@csrf_exempt
@require_http_methods(["GET", "POST"])
def dataset_upload(request):
    """The file streams into private storage; CSRF is checked after the handler is installed."""
    if request.method == "POST":
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > settings.MAX_UPLOAD_BYTES + FORM_OVERHEAD_BYTES:
            return _too_large(request, status=413)
        request.upload_handlers = [PrivateUploadHandler(request)]
    try:
        return _dataset_upload(request)
    finally:
        _discard_upload(request)


def _discard_upload(request):
    """Whatever happened (even a refused CSRF token), no uploaded bytes stay behind."""
    upload = request._files.get(UPLOAD_FIELD) if hasattr(request, "_files") else None
    if upload is not None:
        upload.discard()


@csrf_protect
def _dataset_upload(request):
    if request.method != "POST":
        return _upload_page(request, DatasetUploadForm())
    handler = request.upload_handlers[0]
    form = DatasetUploadForm(request.POST, request.FILES)
    upload = request.FILES.get(UPLOAD_FIELD)
    if handler.exceeded:
        return _too_large(request, status=413)
    try:
        if not form.is_valid():
            return _upload_page(request, form, status=400)
        dataset = services.dataset_create_from_upload(
            owner=request.user,
            upload=upload,
            name=form.cleaned_data["name"],
            description=form.cleaned_data["description"],
            epsilon_total=form.cleaned_data["epsilon_total"],
            delta_total=form.cleaned_data["delta_total"],
            neighbouring=form.cleaned_data["neighbouring"],
            header=form.header_choice,
            remote_addr=client_address(request),
        )
    except services.ServiceError as exc:
        form.add_error("file", str(exc))
        return _upload_page(request, form, status=400)
    shared = shared_budget_text(dataset)
    if shared:
        messages.warning(request, shared + _kept_totals_text(dataset, form.cleaned_data))
    messages.success(
        request, f"{dataset.name} is stored: {dataset.row_count:,} rows. Next, confirm its schema."
    )
    return redirect("dataset_schema", pk=dataset.pk)


def _kept_totals_text(dataset, asked) -> str:
    kept = []
    if (
        asked["epsilon_total"] != dataset.epsilon_total
        or asked["delta_total"] != dataset.delta_total
    ):
        kept.append(
            f"the total you asked for (ε = {plain_number(asked['epsilon_total'])}, "
            f"δ = {plain_number(asked['delta_total'])}) was not used: the shared budget "
            f"keeps its total of ε = {plain_number(dataset.epsilon_total)}, "
            f"δ = {plain_number(dataset.delta_total)}"
        )
    if asked["neighbouring"] != dataset.neighbouring:
        kept.append(f"it keeps its guarantee ({dataset.get_neighbouring_display()})")
    return (" Note: " + "; ".join(kept) + ".") if kept else ""


def _too_large(request, status):
    form = DatasetUploadForm()
    limit_mb = settings.MAX_UPLOAD_BYTES / (1024 * 1024)
    form.errors["file"] = form.error_class(
        [
            f"The file is larger than the limit of {limit_mb:g} MB; nothing was stored. Remove "
            "columns or rows you do not need, or ask the administrator to raise the limit."
        ]
    )
    return _upload_page(request, form, status=status)


def _upload_page(request, form, status=200):
    return render(
        request, "dpportal/datasets/upload.html", {"form": form, "nav": "datasets"}, status=status
    )


# ---------------------------------------------------------------- dataset page


@require_http_methods(["GET"])
def dataset_detail(request, pk):
    dataset = dataset_for_reader(request.user, pk)
    owner = is_owner(request.user, dataset)
    releases = Release.objects.filter(dataset=dataset).select_related("requested_by")
    context = {
        "dataset": dataset,
        "is_owner": owner,
        "nav": "datasets",
        "releases": [_release_row(r, owner) for r in releases],
        "new_release_url": url_or_none("release_new", dataset_pk=dataset.pk),
        "ledger_url": url_or_none("dataset_ledger", pk=dataset.pk),
        "schema_rows": schema_rows(dataset.schema) if dataset.schema_confirmed else [],
        "spent_percent": _percent(dataset.epsilon_spent, dataset.epsilon_total),
        "read_as": (dataset.profile or {}).get("read_as") if owner else None,
        "shared_budget": shared_budget_text(dataset) if owner else "",
        "budget_form": BudgetForm(initial=_budget_initial(dataset)) if owner else None,
        "same_people_form": same_people_form(dataset) if owner else None,
        "auditor_form": AuditorForm() if owner else None,
        "publishing_form": publishing_form(dataset) if owner else None,
        "auditors": dataset.auditors.order_by("username") if owner else [],
        "invitations": services.pending_invitations(dataset) if owner else [],
        "reserved_epsilon": held_on_budget(dataset.budget_id)[0],
    }
    return render(request, "dpportal/datasets/detail.html", context)


def _release_row(release: Release, owner: bool) -> tuple[Release, str | None, str]:
    """The release, its page's address (`url_or_none`) and its status label: for auditors, the
    status as of the last whole minute (T10)."""
    label = Release.Status(shown_status(release, exact=owner)).label
    return release, url_or_none("release_detail", pk=release.pk), label


def _percent(part, whole) -> int:
    return round(100 * part / whole) if whole else 0


def _budget_initial(dataset):
    return {
        "epsilon_total": plain_number(dataset.epsilon_total),
        "delta_total": plain_number(dataset.delta_total),
        "neighbouring": dataset.neighbouring,
    }


def schema_rows(schema):
    """One line per column of the confirmed (public) schema, from the schema module itself."""
    parsed = mechanisms.Schema.from_dict(schema)
    return [
        {
            "name": column["name"],
            "type": column.get("type") or column.get("role"),  # role: the person column
            "detail": _column_detail(column, parsed, schema),
        }
        for column in schema["columns"]
    ]


def _column_detail(column, parsed, schema) -> str:
    if column.get("role") == "person_id":
        return person_detail(schema)
    if column["type"] == "ignored":
        return "not used in releases"
    missing = ', plus "(missing)"' if column.get("missing", "cell") == "cell" else ", none missing"
    if column["type"] == "categorical":
        extra = ' plus "(other)"' if column.get("unknown") == "other" else ""
        return (
            f"{len(column['categories'])} categories{extra}: "
            + ", ".join(column["categories"][:12])
            + (" ..." if len(column["categories"]) > 12 else "")
            + missing
        )
    spec = parsed.column(column["name"])
    kind = f"{column['part']} of the date, " if column["type"] == "date" else ""
    whole = "whole numbers, " if spec.integer and column["type"] == "numeric" else ""
    return f"{kind}{whole}from {column['lower']} to {column['upper']}, {spec.n_bins} bins{missing}"


# ---------------------------------------------------------------- owner actions


@require_POST
def dataset_budget(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    form = BudgetForm(request.POST)
    if form.is_valid():
        try:
            services.dataset_change_budget(
                dataset=dataset,
                user=request.user,
                remote_addr=client_address(request),
                epsilon_total=form.cleaned_data["epsilon_total"],
                delta_total=form.cleaned_data["delta_total"],
                neighbouring=form.cleaned_data["neighbouring"],
            )
        except services.ServiceError as exc:
            messages.error(request, str(exc))
            return redirect("dataset_detail", pk=dataset.pk)
        messages.success(request, "The privacy budget was updated.")
    else:
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, f"Budget not changed: {error}")
    return redirect("dataset_detail", pk=dataset.pk)


@require_POST
def dataset_auditors(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    form = AuditorForm(request.POST)
    add = request.POST.get("action") != "remove"
    if not form.is_valid():
        messages.error(request, "Enter the username of the person to add or remove.")
        return redirect("dataset_detail", pk=dataset.pk)
    try:
        services.dataset_set_auditor(
            dataset=dataset,
            user=request.user,
            add=add,
            username=form.cleaned_data["username"].strip(),
            remote_addr=client_address(request),
        )
    except services.ServiceError as exc:
        messages.error(request, str(exc))
    else:
        verb = "can now see" if add else "can no longer see"
        messages.success(
            request,
            f"{form.cleaned_data['username']} {verb} this dataset's releases and audit log.",
        )
    return redirect("dataset_detail", pk=dataset.pk)


@require_http_methods(["GET", "POST"])
def dataset_delete(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    form = DeleteForm(request.POST or None, dataset=dataset)
    public_pages = services.public_pages(dataset).count()
    if request.method == "POST" and form.is_valid():
        try:
            services.dataset_delete(
                dataset=dataset, user=request.user, remote_addr=client_address(request)
            )
        except services.ServiceError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                f"{dataset.name} was deleted: its stored files are gone"
                + (f", {public_pages} public page(s) withdrawn" if public_pages else "")
                + "; its releases and audit trail remain.",
            )
            return redirect("home")
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "dpportal/datasets/delete.html",
        {"dataset": dataset, "form": form, "nav": "datasets", "public_pages": public_pages},
        status=status,
    )


# ---------------------------------------------------------------- schema


@require_http_methods(["GET", "POST"])
def dataset_schema(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    if dataset.is_deleted:
        messages.error(request, "This dataset has been deleted; its schema can no longer change.")
        return redirect("dataset_detail", pk=dataset.pk)
    entries = schema_entries(dataset)
    # a new schema ignores capitals and surrounding spaces in categories (a source cannot)
    match = "exact" if dataset.schema_confirmed or dataset.is_external else "casefold"
    initial = [schema_initial(e, match) for e in entries]
    data = _with_person_row(request.POST, dataset) if request.method == "POST" else None
    formset = schema_formset(data, initial, dataset)
    statement = PublicKnowledgeForm(data)
    person = person_form(data, dataset, services.dp_estimates.estimated_person(dataset))
    clamping_check = []
    if request.method == "POST" and formset.total_form_count() != len(dataset.columns):
        formset = schema_formset(None, initial, dataset)
        formset._non_form_errors = formset.error_class(
            ["The page was out of date (the columns changed); check the values and confirm again."]
        )
    elif request.method == "POST" and all(
        [formset.is_valid(), statement.is_valid(), person.is_valid()]
    ):
        schema = person.apply(
            {
                "columns": [
                    form.schema_entry(name)
                    for form, name in zip(formset.forms, dataset.columns, strict=True)
                ]
            }
        )
        try:
            confirmed = services.dataset_confirm_schema(
                dataset=dataset,
                user=request.user,
                schema=schema,
                remote_addr=client_address(request),
                accept_clamping=request.POST.get("accept_clamping") == "on",
            )
        except services.ClampingNotAccepted as exc:
            clamping_check = exc.clamping  # owner-only: this page is the owner's
        except services.ServiceError as exc:
            formset._non_form_errors = formset.error_class(exc.problems)
        else:
            messages.success(
                request, "Schema confirmed: releases of this dataset are now possible."
            )
            for entry in (confirmed.profile or {}).get("clamping", []):
                (messages.warning if entry["warn"] else messages.info)(request, entry["message"])
            return redirect("dataset_detail", pk=dataset.pk)
    rows = _schema_form_rows(dataset, formset, person)
    # a question asked again (clamping_check) is no refusal: 200
    status = 400 if request.method == "POST" and not clamping_check else 200
    return render(
        request,
        "dpportal/datasets/schema.html",
        {
            "dataset": dataset,
            "formset": formset,
            "rows": rows,
            "nav": "datasets",
            "statement": statement,
            "person": person,
            "offer": dp_estimate_offer(dataset),
            "clamping_check": clamping_check,
            "error_list": _error_list(formset, statement, person),
        },
        status=status,
    )


def _with_person_row(post, dataset):
    """The posted form with the person column's row read as "ignored": the person question
    alone sets that column's role (`PersonForm.apply`), so its row needs nothing else."""
    chosen = post.get("person_column")
    if chosen not in dataset.columns:
        return post
    data = post.copy()
    data[f"form-{list(dataset.columns).index(chosen)}-type"] = "ignored"
    return data


def _error_list(formset, statement, person) -> list[str]:
    """Every problem of a refused form in one list above the table, each naming its column
    and field (the schema forms' messages do; the person question's are named here)."""
    if not formset.is_bound:
        return []
    problems = [m for form in formset.forms for errors in form.errors.values() for m in errors]
    for field, errors in person.errors.items():
        label = person.fields[field].label if field in person.fields else "Person question"
        problems += [f"{label} {m}" for m in errors]
    problems += list(statement.errors.get("public_knowledge", []))
    return problems


def _schema_form_rows(dataset, formset, person):
    """One row per column: its name, form, proposed type, empty cells, latest DP estimate and
    whether the person question names it."""
    proposals = {p["name"]: p for p in (dataset.profile or {}).get("proposals", [])}
    estimates = column_estimates(dataset)
    # owner-only: the values the confirmed bounds clamp, counted at confirmation
    confirmed = (dataset.profile or {}).get("clamping", []) if dataset.schema_confirmed else []
    clamping = {c["column"]: c for c in confirmed}
    chosen = person["person_column"].value()
    rows = []
    for name, form in zip(dataset.columns, formset.forms, strict=True):
        proposal = proposals.get(name, {})
        rows.append(
            {
                "name": name,
                "name_parts": NAME_BREAKS.split(name),  # may wrap after _ - . / (a <wbr>)
                "form": form,
                "missing": proposal.get("missing", 0),
                "proposed_type": proposal.get("type"),
                "estimate": estimates.get(name),
                "clamping": clamping.get(name),
                "is_person": name == chosen,
            }
        )
    return rows
