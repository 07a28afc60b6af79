"""Release pages: the new-release form, the job page with live progress and results, downloads.

Thin views: permission helper → form → one service call → render or redirect. Owners see
everything; auditors see only public parts; everyone else gets 404.
"""

from django.contrib import messages
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dpportal import services
from dpportal.access.rules import dataset_for_owner, releases_visible_to
from dpportal.access.timing import shown_duration_text, shown_status
from dpportal.core import object_store
from dpportal.core.formatting import plain_number
from dpportal.models import AuditEvent, BudgetLedgerEntry, Release
from dpportal.releases import accuracy_preview, catalogue, packaging, planner, risk_words, utility
from dpportal.releases.forms import ReleaseForm
from dpportal.releases.results import results_context
from dpportal.services.estimates import ESTIMATE_MECHANISM
from dpportal.signals import client_address


def release_for_reader(user, pk) -> Release:
    """The release if the user owns or audits its dataset; otherwise 404."""
    release = (
        releases_visible_to(user).filter(pk=pk).select_related("dataset", "requested_by").first()
    )
    if release is None:
        raise Http404("No such release.")
    return release


def release_for_owner(user, pk) -> Release:
    """The release if the user owns its dataset; otherwise 404 (auditors included)."""
    release = release_for_reader(user, pk)
    if release.dataset.owner_id != user.pk:
        raise Http404("No such release.")
    return release


# ---------------------------------------------------------------- new release


def release_new(request, dataset_pk):
    dataset = dataset_for_owner(request.user, dataset_pk)
    if dataset.is_deleted or not dataset.schema_confirmed:
        return render(request, "dpportal/releases/new.html", {"dataset": dataset, "form": None})
    form = ReleaseForm(request.POST or None, dataset=dataset, user=request.user, spends=True)
    if request.method == "POST" and form.is_valid():
        try:
            release = services.release_create(
                dataset=dataset,
                user=request.user,
                **form.release_fields(),
                remote_addr=client_address(request),
                submission_token=form.cleaned_data["submission"],
            )
        except services.DuplicateSubmission as exc:  # a double click: show the first release
            messages.info(request, str(exc))
            return redirect("release_detail", pk=exc.release.pk)
        except services.ServiceError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Release requested: it is queued and will start shortly.")
            return redirect("release_detail", pk=release.pk)
    return render(
        request,
        "dpportal/releases/new.html",
        {
            "dataset": dataset,
            "form": form,
            "nav": "datasets",
            "cards": catalogue.cards(),
            "page_config": {
                "estimate_url": reverse("release_estimate", args=[dataset.pk]),
                "plan_url": reverse("release_plan", args=[dataset.pk]),
            },
            "target_form": planner.TargetForm(dataset=dataset),
        },
    )


@require_GET
def release_estimate(request, dataset_pk):
    """Expected accuracy and budget left, from public information only (never the raw data)."""
    dataset = dataset_for_owner(request.user, dataset_pk)
    if not dataset.schema_confirmed:
        return JsonResponse({"ok": False, "errors": ["Confirm the schema first."]})
    form = ReleaseForm(request.GET, dataset=dataset)
    if not form.is_valid():
        errors = [
            f"{_field_label(form, name)}: {error}" if name != "__all__" else error
            for name, errs in form.errors.items()
            for error in errs
        ]
        return JsonResponse({"ok": False, "errors": errors})
    data = form.cleaned_data
    epsilon_left = dataset.epsilon_remaining - data["epsilon"]
    delta_left = dataset.delta_remaining - data["delta"]
    return JsonResponse(
        {
            "ok": True,
            "accuracy": form.expected_accuracy["lines"],
            "accuracy_table": form.expected_accuracy["table"],
            "warnings": form.expected_accuracy["warnings"],
            "epsilon_left": plain_number(epsilon_left),
            "delta_left": plain_number(delta_left),
            "fits": epsilon_left >= 0 and delta_left >= 0,
            "epsilon_total": plain_number(dataset.epsilon_total),
            "risk": risk_words.preview_risk(dataset, data["epsilon"], data["delta"]),
        }
    )


@require_GET
def release_plan(request, dataset_pk):
    """The planner: the ε each mechanism needs for the accuracy asked (public information)."""
    dataset = dataset_for_owner(request.user, dataset_pk)
    if not dataset.schema_confirmed:
        return JsonResponse({"ok": False, "errors": ["Confirm the schema first."]})
    target = planner.TargetForm(request.GET, dataset=dataset)
    if not target.is_valid():
        errors = [error for errs in target.errors.values() for error in errs]
        return JsonResponse({"ok": False, "errors": errors})
    return JsonResponse(
        {
            "ok": True,
            "target": f"±{target.cleaned_data['target']:,.0f} rows",
            "confidence": accuracy_preview.CONFIDENCE_TEXT,
            "proposals": planner.proposals(dataset, request.GET, target.cleaned_data["target"]),
            "epsilon_remaining": plain_number(dataset.epsilon_remaining),
        }
    )


def _field_label(form, name) -> str:
    return str(form.fields[name].label) if name in form.fields else name


# ---------------------------------------------------------------- job page and results


GENERIC_FAILURE = "The release failed; the custodian can see why."


@require_GET
def release_detail(request, pk):
    release, is_owner = _release_as_seen(request.user, pk)
    context = {
        "release": release,
        "is_owner": is_owner,
        "nav": "releases",
        "title": catalogue.mechanism_title(release.mechanism),
        "progress": progress_payload(release, is_owner),
        "progress_config": {"url": reverse("release_progress", args=[release.pk])},
        "refunded": _refunded(release),
    }
    estimate = release.mechanism == ESTIMATE_MECHANISM  # a schema-page estimate: no package
    context["estimate"] = (release.manifest or {}).get("result") if estimate else None
    if release.status == Release.Status.DONE and not estimate:
        context.update(results_context(request, release, is_owner))
    if release.status == Release.Status.FAILED and not is_owner:
        # the mechanism's reason can quote facts about the data (e.g. how many values fall
        # outside the declared categories, and the first row): the owner's eyes only
        release.error_message = GENERIC_FAILURE
    return render(request, "dpportal/releases/detail.html", context)


def _refunded(release) -> bool:
    return release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists()


def _release_as_seen(user, pk) -> tuple[Release, bool]:
    """The release and whether the user owns it. Auditors get it as it was at the last whole
    minute (this copy is for display only and never saved): watching the job page or its
    progress endpoint must not time a run to the second (T10)."""
    release = release_for_reader(user, pk)
    is_owner = release.dataset.owner_id == user.pk
    status = shown_status(release, exact=is_owner)
    if status != release.status:
        release.status = status
        release.finished_at = None
        if status == Release.Status.QUEUED:
            release.started_at = None
    return release, is_owner


def progress_payload(release, is_owner: bool) -> dict:
    """Status and progress for the job page. Auditors get only coarse state: the status as of
    the last whole minute (see _release_as_seen), no step counts (each step's moment would time
    the run) and the elapsed time in whole minutes. Owners, who can see the data anyway, get
    live steps and exact times."""
    done, total = release.progress_done, release.progress_total
    if not is_owner:
        done = total = 0
    return {
        "status": release.status,
        "status_label": release.get_status_display(),
        "stage": _stage_label(release) if is_owner else release.get_status_display(),
        "done": done,
        "total": total,
        "percent": _percent(release) if is_owner else _percent_coarse(release),
        "elapsed": _elapsed_text(release, is_owner),
        "terminal": release.is_terminal,
    }


def _percent(release) -> int:
    if release.status == Release.Status.DONE:
        return 100
    if release.progress_total:
        return min(99, round(100 * release.progress_done / release.progress_total))
    return 0


def _percent_coarse(release) -> int:
    return 100 if release.status == Release.Status.DONE else 0


def _stage_label(release) -> str:
    if release.status == Release.Status.QUEUED:
        return "Waiting for a worker"
    if release.status != Release.Status.RUNNING:
        return release.get_status_display()
    return catalogue.stage_label(
        release.mechanism, release.progress_stage, release.progress_done, release.progress_total
    )


def _elapsed_text(release, is_owner: bool) -> str:
    if release.started_at is None:
        return ""
    end = release.finished_at or timezone.now()
    seconds = max(0, (end - release.started_at).total_seconds())
    return shown_duration_text(seconds, exact=is_owner)


@require_GET
def release_progress(request, pk):
    release, is_owner = _release_as_seen(request.user, pk)
    return JsonResponse(progress_payload(release, is_owner))


@require_POST
def release_cancel(request, pk):
    release = release_for_owner(request.user, pk)
    try:
        cancelled = services.release_cancel(
            release=release, user=request.user, remote_addr=client_address(request)
        )
    except services.ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, cancel_text(cancelled, _refunded(cancelled)))
    return redirect("release_detail", pk=release.pk)


def cancel_text(release, refunded: bool) -> str:
    """What cancelling did, from the release's own record: whether its data was read (an
    earlier attempt may have read it before its worker stopped) and whether ε came back."""
    epsilon = plain_number(release.epsilon)
    if refunded:
        return (
            f"Release cancelled. Its data was never read, so its privacy budget "
            f"(ε = {epsilon}) was given back to the dataset."
        )
    if release.data_was_read:
        return (
            f"Release cancelled. An earlier attempt had already read its data before its "
            f"worker stopped, so its privacy budget (ε = {epsilon}) stays spent."
        )
    return f"Release cancelled. Its privacy budget (ε = {epsilon}) was not given back."


# ---------------------------------------------------------------- downloads


def _attachment(content: bytes, filename: str, content_type: str) -> HttpResponse:
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _zip_attachment(release) -> StreamingHttpResponse:
    """The package zip streamed from where it is stored (the bucket too), in pieces: through
    the portal, after its permission check, never by a link to the store."""
    path = packaging.package_zip_path(release)
    response = StreamingHttpResponse(object_store.chunks(path), content_type="application/zip")
    response["Content-Length"] = str(object_store.size(path))
    response["Content-Disposition"] = f'attachment; filename="release-{release.pk}.zip"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _audit_download(request, release, what: str) -> None:
    services.audit_record(
        action=AuditEvent.Action.DOWNLOAD,
        actor=request.user,
        dataset=release.dataset,
        release=release,
        details={"file": what},
        remote_addr=client_address(request),
    )


def _done_release(user, pk, *, owner_only=False) -> Release:
    release, is_owner = _release_as_seen(user, pk)
    if owner_only and not is_owner:
        raise Http404("No such release.")
    if release.status != Release.Status.DONE:  # auditors: done by the last whole minute
        raise Http404("This release has no files yet.")
    if release.mechanism == ESTIMATE_MECHANISM:
        raise Http404("A schema estimate has no files; its result is on its page.")
    return release


CONTENT_TYPES = {
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".pdf": "application/pdf",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}


@require_GET
def release_download_file(request, pk, filename):
    release = _done_release(request.user, pk)
    content = packaging.package_file(release, filename)
    if content is None:
        raise Http404("No such file in this release.")
    _audit_download(request, release, filename)
    suffix = filename[filename.rfind(".") :]
    return _attachment(
        content,
        f"release-{release.pk}-{filename}",
        CONTENT_TYPES.get(suffix, "application/octet-stream"),
    )


@require_GET
def release_download_zip(request, pk):
    release = _done_release(request.user, pk)
    response = _zip_attachment(release)
    _audit_download(request, release, "package.zip")
    return response


@require_GET
def release_utility_report(request, pk):
    """The custodian-only comparison with the raw data, as a standalone HTML file."""
    release = _done_release(request.user, pk, owner_only=True)
    if release.dataset.is_deleted:  # the report was derived from the raw data, gone with it
        raise Http404("The dataset was deleted, and with it this comparison with its data.")
    report = utility.load_report(release)
    if report is None:
        raise Http404("The comparison with the original data is not ready.")
    _audit_download(request, release, "utility-report.html")
    for entry in report["columns"]:
        entry["rows"] = list(zip(entry["labels"], entry["release"], entry["original"], strict=True))
    html = render_to_string(
        "dpportal/releases/utility_report.html",
        {"release": release, "report": report, "generated": timezone.now()},
    )
    return _attachment(
        html.encode(), f"release-{release.pk}-utility-report.html", "text/html; charset=utf-8"
    )
