"""Request pages: a dataset's requests, one request (its accuracy, budget impact and risk, the
decisions, its release), the decision of the owner or second approver, the analyst's
withdrawal, and the public package of its release.

Readers (`access.rules.requests_visible_to`): the dataset's owner and auditors, the request's
second approver, and the analyst who made it (while it is an analyst). Everyone else gets 404.
The package files are the public package only, as on the release's page.
"""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from dpportal import services
from dpportal.access.rules import (
    dataset_for_requests,
    may_decide,
    releases_visible_to,
    request_for_decider,
    request_for_reader,
    request_for_requester,
    requests_visible_to,
)
from dpportal.analysts import review
from dpportal.analysts.forms import DecisionForm
from dpportal.analysts.views import request_link
from dpportal.models import Release
from dpportal.releases.downloads import file_download, zip_download
from dpportal.signals import client_address


@require_GET
def dataset_requests(request, pk):
    """The dataset's requests the user may read, newest first."""
    dataset = dataset_for_requests(request.user, pk)
    shown = requests_visible_to(request.user).filter(dataset=dataset)
    rows = [
        (r, review.shown_when(request.user, r, r.created_at))
        for r in shown.select_related("requested_by")
    ]
    context = {"dataset": dataset, "rows": rows, "nav": "datasets"}
    return render(request, "dpportal/analysts/requests.html", context)


@require_GET
def request_detail(request, pk):
    release_request = request_for_reader(request.user, pk)
    user = request.user
    decisions = [
        (d, review.shown_when(user, release_request, d.created_at))
        for d in release_request.decisions.select_related("user")
    ]
    context = {
        "req": release_request,
        "dataset": release_request.dataset,
        "nav": "datasets",
        "review": review.request_review(user, release_request),
        "decisions": decisions,
        "created": review.shown_when(user, release_request, release_request.created_at),
        "released": review.release_state(user, release_request),
        "reads_release": releases_visible_to(user).filter(analyst_request=release_request).exists(),
        "decision_form": DecisionForm() if may_decide(user, release_request) else None,
        "may_withdraw": release_request.is_waiting and release_request.requested_by_id == user.pk,
    }
    return render(request, "dpportal/analysts/request.html", context)


@require_POST
def request_decide(request, pk):
    """The owner's or second approver's decision (decision=approve|decline, note)."""
    release_request = request_for_decider(request.user, pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose approve or decline (a note is optional); nothing changed.")
        return redirect("request_detail", pk=pk)
    approve = form.cleaned_data["decision"] == "approve"
    try:
        decided = services.request_decide(
            release_request=release_request,
            user=request.user,
            approve=approve,
            note=form.cleaned_data["note"],
            link_for=request_link(request),
            remote_addr=client_address(request),
        )
    except services.ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, decided_text(decided, approve))
    return redirect("request_detail", pk=pk)


def decided_text(decided, approve: bool) -> str:
    if not approve:
        return "The request is declined: nothing was spent. The analyst has been told."
    if decided.is_waiting:
        return "Your approval is recorded; the request now waits for the other approver."
    return "The request is approved: its release is queued, spending from the analyst's allotment."


@require_POST
def request_withdraw(request, pk):
    release_request = request_for_requester(request.user, pk)
    try:
        services.request_withdraw(
            release_request=release_request,
            user=request.user,
            remote_addr=client_address(request),
        )
    except services.ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "The request is withdrawn; nothing was spent.")
    return redirect("request_detail", pk=pk)


def done_release(user, pk) -> Release:
    """The request's release if the user may read the request and the release is done (as of
    the last whole minute for non-owners); otherwise 404."""
    state = review.release_state(user, request_for_reader(user, pk))
    if state is None or state["status"] != Release.Status.DONE:
        raise Http404("This request has no released files yet.")
    return state["release"]


@require_GET
def request_download_zip(request, pk):
    return zip_download(request, done_release(request.user, pk))


@require_GET
def request_download_file(request, pk, filename):
    response = file_download(request, done_release(request.user, pk), filename)
    if response is None:
        raise Http404("No such file in this release.")
    return response
