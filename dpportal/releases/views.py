"""Release pages: the new-release form, the job page with live progress and results, downloads.

Thin views: permission helper → form → one service call → render or redirect. Owners see
everything; auditors see only public parts; everyone else gets 404.
"""

from functools import partial

from django.contrib import messages
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dpportal import services
from dpportal.access.rules import dataset_for_owner
from dpportal.core.downloads import attachment
from dpportal.core.formatting import plain_number
from dpportal.models import BudgetLedgerEntry, Release
from dpportal.releases import accuracy_preview, catalogue, planner, risk_words, utility
from dpportal.releases.downloads import (
    file_download,
    record_download,
    release_with_files,
    zip_download,
)
from dpportal.releases.forms import ReleaseForm
from dpportal.releases.kinds import describes_schema
from dpportal.releases.presentation import (
    GENERIC_FAILURE,
    progress_payload,
    release_as_seen,
    release_for_owner,
)
from dpportal.releases.results import results_context
from dpportal.services.publishing import utility_report_again
from dpportal.signals import client_address

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
                "preview_url": reverse("release_preview", args=[dataset.pk]),
                "plan_url": reverse("release_plan", args=[dataset.pk]),
            },
            "target_form": planner.TargetForm(dataset=dataset),
        },
    )


@require_GET
def release_preview(request, dataset_pk):
    """Expected accuracy and budget left, from public information only (never the raw data)."""
    dataset = dataset_for_owner(request.user, dataset_pk)
    if not dataset.schema_confirmed:
        return JsonResponse({"ok": False, "errors": ["Confirm the schema first."]})
    answer = preview_answer(
        ReleaseForm(request.GET, dataset=dataset),
        left=(dataset.epsilon_remaining, dataset.delta_remaining),
        epsilon_total=dataset.epsilon_total,
        risk=partial(risk_words.preview_risk, dataset),
    )
    return JsonResponse(answer)


def preview_answer(form, *, left, epsilon_total, risk) -> dict:
    """The accuracy preview's answer for a bound release form: the form's errors, or its
    expected accuracy, the budget `left` = (ε, δ) after it of `epsilon_total`, and
    `risk(ε, δ)` (the owner's page and an analyst's request page alike)."""
    if not form.is_valid():
        errors = [
            f"{_field_label(form, name)}: {error}" if name != "__all__" else error
            for name, errs in form.errors.items()
            for error in errs
        ]
        return {"ok": False, "errors": errors}
    data = form.cleaned_data
    epsilon_left, delta_left = left[0] - data["epsilon"], left[1] - data["delta"]
    return {
        "ok": True,
        "accuracy": form.expected_accuracy["lines"],
        "accuracy_table": form.expected_accuracy["table"],
        "warnings": form.expected_accuracy["warnings"],
        "epsilon_left": plain_number(epsilon_left),
        "delta_left": plain_number(delta_left),
        "fits": epsilon_left >= 0 and delta_left >= 0,
        "epsilon_total": plain_number(epsilon_total),
        "risk": risk(data["epsilon"], data["delta"]),
    }


@require_GET
def release_plan(request, dataset_pk):
    """The planner: the ε each mechanism needs for the accuracy asked (public information)."""
    dataset = dataset_for_owner(request.user, dataset_pk)
    if not dataset.schema_confirmed:
        return JsonResponse({"ok": False, "errors": ["Confirm the schema first."]})
    return JsonResponse(plan_answer(dataset, request.GET, dataset.epsilon_remaining))


def plan_answer(dataset, query, remaining) -> dict:
    """The planner's answer: the ε each kind of release needs, against `remaining` ε."""
    target = planner.TargetForm(query, dataset=dataset)
    if not target.is_valid():
        errors = [error for errs in target.errors.values() for error in errs]
        return {"ok": False, "errors": errors}
    wanted = target.cleaned_data["target"]
    return {
        "ok": True,
        "target": f"±{wanted:,.0f} rows",
        "confidence": accuracy_preview.CONFIDENCE_TEXT,
        "proposals": planner.proposals(dataset, query, wanted, remaining=remaining),
        "epsilon_remaining": plain_number(remaining),
    }


def _field_label(form, name) -> str:
    return str(form.fields[name].label) if name in form.fields else name


# ---------------------------------------------------------------- job page and results


@require_GET
def release_detail(request, pk):
    release, is_owner = release_as_seen(request.user, pk)
    context = {
        "release": release,
        "is_owner": is_owner,
        "nav": "releases",
        "title": catalogue.mechanism_title(release.mechanism),
        "progress": progress_payload(release, is_owner),
        "progress_config": {"url": reverse("release_progress", args=[release.pk])},
        "refunded": _refunded(release),
    }
    estimate = describes_schema(release.mechanism)  # a schema-page estimate: no package
    context["estimate"] = (release.manifest or {}).get("result") if estimate else None
    if release.status == Release.Status.DONE and not estimate:
        context.update(results_context(request, release, is_owner))
        if is_owner and context["report"] is None and not _has_no_report(release.dataset):
            context["comparison"] = utility_report_again(release)
    if release.status == Release.Status.FAILED and not is_owner:
        # the mechanism's reason can quote facts about the data (e.g. how many values fall
        # outside the declared categories, and the first row): the owner's eyes only
        release.error_message = GENERIC_FAILURE
    return render(request, "dpportal/releases/detail.html", context)


def _has_no_report(dataset) -> bool:
    """A deleted dataset's reports went with its raw data; a table that stays where it lives
    never gets one (it would need the raw rows)."""
    return dataset.is_deleted or dataset.is_external


def _refunded(release) -> bool:
    return release.ledger.filter(kind=BudgetLedgerEntry.Kind.REFUND).exists()


@require_GET
def release_progress(request, pk):
    release, is_owner = release_as_seen(request.user, pk)
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


@require_GET
def release_download_file(request, pk, filename):
    response = file_download(request, release_with_files(request.user, pk), filename)
    if response is None:
        raise Http404("No such file in this release.")
    return response


@require_GET
def release_download_zip(request, pk):
    return zip_download(request, release_with_files(request.user, pk))


@require_GET
def release_utility_report(request, pk):
    """The custodian-only comparison with the raw data, as a standalone HTML file."""
    release = release_with_files(request.user, pk, owner_only=True)
    if release.dataset.is_deleted:  # the report was derived from the raw data, gone with it
        raise Http404("The dataset was deleted, and with it this comparison with its data.")
    report = utility.load_report(release)
    if report is None:
        raise Http404("The comparison with the original data is not ready.")
    record_download(request, release, "utility-report.html")
    for entry in report["columns"]:
        entry["rows"] = list(zip(entry["labels"], entry["release"], entry["original"], strict=True))
    html = render_to_string(
        "dpportal/releases/utility_report.html",
        {"release": release, "report": report, "generated": timezone.now()},
    )
    return attachment(
        html.encode(), f"release-{release.pk}-utility-report.html", "text/html; charset=utf-8"
    )
