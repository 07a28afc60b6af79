"""API endpoints of analysts and their requests: the owner's analysts (invite with an
allotment, revoke, the second approver), an analyst's requests (submit with the accuracy
preview, withdraw), the decisions, and the public package of an approved request's release.

The pages' rules, forms and services: `access.rules` (who reads and decides), `RequestForm`
(the new-release form's checks and dry run), `services.request_submit` / `request_decide`
(the allotment lock, the release made through `release_create`). The `Idempotency-Key` header
plays the form's one-time token, as for releases.
"""

from decimal import Decimal

from django.http import JsonResponse
from django.urls import reverse

from dpportal import services
from dpportal.access.rules import (
    analyst_for,
    dataset_for_owner,
    dataset_for_requests,
    is_owner,
    may_decide,
    request_for_decider,
    request_for_reader,
    request_for_requester,
    requests_visible_to,
    sees_expected_accuracy,
)
from dpportal.analysts import review
from dpportal.analysts.forms import AnalystInviteForm, DecisionForm, RequestForm, SecondApproverForm
from dpportal.analysts.request_views import done_release
from dpportal.analysts.views import invite_analyst, request_link
from dpportal.api.auth import ApiError, api_endpoint, form_data, invalid, read_json
from dpportal.api.present import when
from dpportal.api.release_views import valid_form_and_nonce
from dpportal.core.formatting import plain_number
from dpportal.releases.downloads import file_download, zip_download
from dpportal.signals import client_address


def _valid(form):
    if not form.is_valid():
        raise invalid(form)
    return form.cleaned_data


# ---------------------------------------------------------------- the owner's analysts


def analysts_json(dataset) -> dict:
    return {
        "second_approver": getattr(dataset.second_approver, "username", None),
        "analysts": [
            {
                "id": analyst.pk,
                "name": analyst.name,
                "email": analyst.email,
                "status": analyst.status,
                "created_at": when(analyst.created_at, exact=True),
                **review.allotment_figures(analyst),
            }
            for analyst in dataset.analysts.select_related("user")
        ],
    }


@api_endpoint("GET", "POST")
def dataset_analysts(request, pk):
    """GET: the analysts, their allotments, the second approver. POST {"email", "epsilon",
    "delta"}: invite with an allotment (reserved now); {"revoke": id}: revoke an analyst
    (returns its allotment); {"second_approver": user name or ""}: the two-person rule."""
    dataset = dataset_for_owner(request.user, pk)
    if request.method == "GET":
        return JsonResponse(analysts_json(dataset))
    body, where = read_json(request), client_address(request)
    if "revoke" in body:
        form_data(body, ("revoke",))
        if not isinstance(body["revoke"], int):
            raise ApiError(400, "revoke: give the analyst's id (a whole number).")
        services.analyst_revoke(
            dataset=dataset, user=request.user, analyst_pk=body["revoke"], remote_addr=where
        )
    elif "second_approver" in body:
        data = _valid(SecondApproverForm(form_data(body, SecondApproverForm.base_fields)))
        services.second_approver_set(
            dataset=dataset, user=request.user, username=data["second_approver"], remote_addr=where
        )
    else:
        data = _valid(AnalystInviteForm(form_data(body, AnalystInviteForm.base_fields)))
        invite_analyst(request, dataset, data)
        dataset.refresh_from_db()
        return JsonResponse(analysts_json(dataset), status=201)
    dataset.refresh_from_db()
    return JsonResponse(analysts_json(dataset))


@api_endpoint("GET")
def analyst_workspace(request, dataset_pk):
    """For an analyst: its dataset's public metadata (name, description, owner, relation,
    confirmed schema) and its allotment; nothing else of the dataset."""
    analyst = analyst_for(request.user, dataset_pk)
    dataset = analyst.dataset
    return JsonResponse(
        {
            "dataset": dataset.pk,
            "name": dataset.name,
            "description": dataset.description,
            "owner": dataset.owner.get_username(),
            "deleted": dataset.is_deleted,
            "neighbouring": dataset.neighbouring,
            "schema": dataset.schema if dataset.schema_confirmed else None,
            "allotment": review.allotment_figures(analyst),
            "requests_url": reverse("api_dataset_requests", args=[dataset.pk]),
        }
    )


# ---------------------------------------------------------------- requests


def request_json(user, release_request) -> dict:
    """A request as the user may see it: its settings, decisions, review and release."""
    exact = is_owner(user, release_request.dataset)
    data = {
        "id": release_request.pk,
        "dataset": release_request.dataset_id,
        "analyst": release_request.requested_by.get_username(),
        "mechanism": release_request.mechanism,
        "columns": release_request.columns,
        "epsilon": plain_number(release_request.epsilon),
        "delta": plain_number(release_request.delta),
        "purpose": release_request.purpose,
        "status": release_request.status,
        "second_approver": getattr(release_request.second_approver, "username", None),
        "created_at": when(release_request.created_at, exact=exact),
        "decided_at": when(release_request.decided_at, exact=exact),
        "decisions": [
            {
                "by": d.user.get_username(),
                "approved": d.approved,
                "note": d.note,
                "at": when(d.created_at, exact=exact),
            }
            for d in release_request.decisions.select_related("user")
        ],
        "you_may_decide": may_decide(user, release_request),
        "review": review.request_review(user, release_request),
        "release": _release_json(user, release_request),
        "url": reverse("api_request_detail", args=[release_request.pk]),
    }
    if sees_expected_accuracy(user, release_request.dataset):
        data["params"] = release_request.params
    return data


def _release_json(user, release_request) -> dict | None:
    state = review.release_state(user, release_request)
    if state is None:
        return None
    pk = release_request.pk
    return {
        "id": state["release"].pk,
        "status": state["status"],
        "files": [
            {"name": name, "url": reverse("api_request_file", args=[pk, name])}
            for name in state["files"]
        ],
        "package_url": reverse("api_request_package", args=[pk]) if state["files"] else None,
    }


@api_endpoint("GET", "POST")
def dataset_requests(request, pk):
    """GET: the dataset's requests the token's user may see. POST (an analyst of the dataset,
    with an Idempotency-Key): request a release; spends nothing until approved."""
    if request.method == "GET":
        dataset = dataset_for_requests(request.user, pk)
        shown = requests_visible_to(request.user).filter(dataset=dataset)
        return JsonResponse({"requests": [request_json(request.user, r) for r in shown]})
    analyst = analyst_for(request.user, pk)
    dataset = analyst.dataset
    if dataset.is_deleted or not dataset.schema_confirmed:
        raise ApiError(409, "Requests need a dataset that is not deleted, with a confirmed schema.")
    form, nonce = valid_form_and_nonce(request, lambda data: RequestForm(data, analyst=analyst))
    try:
        made = services.request_submit(
            analyst=analyst,
            user=request.user,
            **form.request_fields(),
            submission_token=nonce,
            link_for=request_link(request),
            remote_addr=client_address(request),
        )
    except services.DuplicateRequest as exc:
        return JsonResponse(request_json(request.user, exc.request) | {"replayed": True})
    body = request_json(request.user, made) | {"replayed": False}
    response = JsonResponse(body, status=201)
    response["Location"] = body["url"]
    return response


@api_endpoint("GET")
def request_preview(request, dataset_pk):
    """For an analyst: the expected accuracy (where the row count is public), what is left of
    the allotment after it, and the risk in words, of a request with these settings."""
    analyst = analyst_for(request.user, dataset_pk)
    if analyst.dataset.is_deleted or not analyst.dataset.schema_confirmed:
        raise ApiError(409, "The dataset's schema is not confirmed.")
    form = RequestForm(request.GET, analyst=analyst)
    unknown = sorted(set(request.GET) - set(form.fields))
    if unknown:
        raise ApiError(400, f"Unknown parameter(s): {', '.join(unknown)}.")
    if not form.is_valid():
        raise invalid(form)
    epsilon, delta = form.cleaned_data["epsilon"], form.cleaned_data["delta"]
    available = review.allotment_figures(analyst)
    left = Decimal(available["epsilon_available"]) - epsilon
    return JsonResponse(
        {
            "accuracy": form.expected_accuracy
            if sees_expected_accuracy(request.user, analyst.dataset)
            else {"withheld": review.ACCURACY_FOR_OWNER},
            "epsilon_left": plain_number(left),
            "fits": left >= 0 and delta <= Decimal(available["delta_available"]),
            "risk": review.analyst_preview_risk(analyst, epsilon, delta),
        }
    )


@api_endpoint("GET")
def request_detail(request, pk):
    return JsonResponse(request_json(request.user, request_for_reader(request.user, pk)))


@api_endpoint("POST")
def request_decide(request, pk):
    """{"decision": "approve" | "decline", "note": "..."}: the owner's or second approver's."""
    release_request = request_for_decider(request.user, pk)
    data = _valid(DecisionForm(form_data(read_json(request), DecisionForm.base_fields)))
    decided = services.request_decide(
        release_request=release_request,
        user=request.user,
        approve=data["decision"] == "approve",
        note=data["note"],
        link_for=request_link(request),
        remote_addr=client_address(request),
    )
    return JsonResponse(request_json(request.user, decided))


@api_endpoint("POST")
def request_withdraw(request, pk):
    """The analyst withdraws its own waiting request (nothing was spent)."""
    release_request = request_for_requester(request.user, pk)
    services.request_withdraw(
        release_request=release_request, user=request.user, remote_addr=client_address(request)
    )
    return JsonResponse(request_json(request.user, request_for_reader(request.user, pk)))


@api_endpoint("GET")
def request_package(request, pk):
    """The approved request's public package as one zip (recorded as a download)."""
    return zip_download(request, done_release(request.user, pk))


@api_endpoint("GET")
def request_file(request, pk, filename):
    """One file of the approved request's public package (recorded as a download)."""
    response = file_download(request, done_release(request.user, pk), filename)
    if response is None:
        raise ApiError(404, f"No file {filename!r} in this release; see the request's files.")
    return response
