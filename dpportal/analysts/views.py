"""Analysts' pages: the owner's analysts page (invite with an allotment, revoke, name the
second approver), the analyst's workspace (the dataset's public metadata, its allotment and
its requests) and the new-request form with its accuracy preview and planner.

Thin views: permission helper (`access.rules`) → form → one service call → render or redirect.
The workspace and the request form are the analyst's only pages of a dataset: the owner's and
auditors' dataset pages answer it 404.
"""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dpportal import services
from dpportal.access.rules import analyst_for, dataset_for_owner, sees_expected_accuracy
from dpportal.analysts import review
from dpportal.analysts.forms import AnalystInviteForm, RequestForm, SecondApproverForm
from dpportal.analysts.models import held_on_budget
from dpportal.datasets.views import schema_rows
from dpportal.releases import catalogue, planner
from dpportal.releases.views import plan_answer, preview_answer
from dpportal.services.requests import promised
from dpportal.signals import client_address

PLANNER_FOR_OWNER = (
    "The planner is not available to analysts on this dataset: it works from the number of "
    "rows, which is private here. Use the accuracy the owner tells you, or ask the owner."
)


def request_link(request):
    """Makes the absolute URL of a request's page, for the e-mails."""
    return lambda pk: request.build_absolute_uri(reverse("request_detail", args=[pk]))


# ---------------------------------------------------------------- the owner's analysts page


@require_http_methods(["GET", "POST"])
def dataset_analysts(request, pk):
    """GET: the dataset's analysts, their allotments and the approval rule. POST action=invite
    (email, epsilon, delta), action=revoke (analyst=<id>) or action=approver (second_approver)."""
    dataset = dataset_for_owner(request.user, pk)
    invite = AnalystInviteForm(request.POST if request.POST.get("action") == "invite" else None)
    if request.method == "POST" and (request.POST.get("action") != "invite" or invite.is_valid()):
        try:
            _owner_action(request, dataset, invite)
        except services.ServiceError as exc:
            messages.error(request, str(exc))
        return redirect("dataset_analysts", pk=dataset.pk)
    held = held_on_budget(dataset.budget_id)
    context = {
        "dataset": dataset,
        "nav": "datasets",
        "analysts": [
            (analyst, review.allotment_figures(analyst))
            for analyst in dataset.analysts.select_related("user", "invitation")
        ],
        "invite_form": invite,
        "approver_form": SecondApproverForm(
            initial={"second_approver": getattr(dataset.second_approver, "username", "")}
        ),
        "reserved_epsilon": held[0],
    }
    return render(
        request,
        "dpportal/analysts/analysts.html",
        context,
        status=400 if request.method == "POST" else 200,
    )


def _owner_action(request, dataset, invite) -> None:
    action, where = request.POST.get("action"), client_address(request)
    if action == "revoke":
        analyst = services.analyst_revoke(
            dataset=dataset,
            user=request.user,
            analyst_pk=_int(request.POST.get("analyst")),
            remote_addr=where,
        )
        messages.success(
            request,
            f"{analyst.name}'s access is revoked; what the allotment still held went back to "
            "the dataset's budget.",
        )
    elif action == "approver":
        form = SecondApproverForm(request.POST)
        if not form.is_valid():
            raise services.ServiceError("Give the second approver's user name (or nothing).")
        services.second_approver_set(
            dataset=dataset,
            user=request.user,
            username=form.cleaned_data["second_approver"],
            remote_addr=where,
        )
        messages.success(request, "The approval rule is saved.")
    elif action == "invite":
        data = invite.cleaned_data
        invite_analyst(request, dataset, data)
        messages.success(
            request,
            f"An invitation was e-mailed to {data['email']}; its allotment is reserved from the "
            f"budget. The link works once, for {services.invitations.INVITATION_DAYS} days.",
        )
    else:
        raise services.ServiceError("Choose what to do: invite, revoke or set the approval rule.")


def invite_analyst(request, dataset, data):
    """`services.analyst_invite` with a valid AnalystInviteForm's data (page and API)."""
    return services.analyst_invite(
        dataset=dataset,
        user=request.user,
        email=data["email"],
        epsilon=data["epsilon"],
        delta=data["delta"] or 0,
        link_for=lambda secret: request.build_absolute_uri(
            reverse("invitation_accept", args=[secret])
        ),
        remote_addr=client_address(request),
    )


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


# ---------------------------------------------------------------- the analyst's pages


@require_GET
def analyst_workspace(request, dataset_pk):
    """The analyst's view of its dataset: public metadata, allotment, its own requests."""
    analyst = analyst_for(request.user, dataset_pk)
    dataset = analyst.dataset
    context = {
        "dataset": dataset,
        "analyst": analyst,
        "nav": "datasets",
        "allotment": review.allotment_figures(analyst),
        "schema_rows": schema_rows(dataset.schema) if dataset.schema_confirmed else [],
        "requests": analyst.requests.select_related("release"),
        "may_request": dataset.schema_confirmed and not dataset.is_deleted,
    }
    return render(request, "dpportal/analysts/workspace.html", context)


@require_http_methods(["GET", "POST"])
def request_new(request, dataset_pk):
    """The new-release form for an analyst: submitting it makes a waiting request."""
    analyst = analyst_for(request.user, dataset_pk)
    dataset = analyst.dataset
    if dataset.is_deleted or not dataset.schema_confirmed:
        return render(
            request, "dpportal/analysts/request_new.html", {"dataset": dataset, "form": None}
        )
    available = _available(analyst)
    form = RequestForm(
        request.POST or None, analyst=analyst, available=available[0], user=request.user
    )
    if request.method == "POST" and form.is_valid():
        try:
            made = services.request_submit(
                analyst=analyst,
                user=request.user,
                **form.request_fields(),
                submission_token=form.cleaned_data["submission"],
                link_for=request_link(request),
                remote_addr=client_address(request),
            )
        except services.DuplicateRequest as exc:
            messages.info(request, str(exc))
            return redirect("request_detail", pk=exc.request.pk)
        except services.ServiceError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                "Request sent: the dataset's owner has been told. Nothing is spent until it is "
                "approved.",
            )
            return redirect("request_detail", pk=made.pk)
    context = {
        "dataset": dataset,
        "analyst": analyst,
        "form": form,
        "available": available,
        "nav": "datasets",
        "cards": catalogue.cards(),
        "page_config": {
            "preview_url": reverse("request_preview", args=[dataset.pk]),
            "plan_url": reverse("request_plan", args=[dataset.pk]),
        },
        "target_form": planner.TargetForm(dataset=dataset),
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "dpportal/analysts/request_new.html", context, status=status)


def _available(analyst):
    waiting = promised(analyst)
    return analyst.epsilon_held - waiting[0], analyst.delta_held - waiting[1]


@require_GET
def request_preview(request, dataset_pk):
    """The accuracy preview for an analyst: against what its allotment can still give, the
    risk of its allotment's releases together; the accuracy itself only where the dataset's
    row count is public (the preview reads it)."""
    analyst = analyst_for(request.user, dataset_pk)
    dataset = analyst.dataset
    if dataset.is_deleted or not dataset.schema_confirmed:
        return JsonResponse({"ok": False, "errors": ["The dataset's schema is not confirmed."]})
    answer = preview_answer(
        RequestForm(request.GET, analyst=analyst),
        left=_available(analyst),
        epsilon_total=analyst.epsilon_allotted,
        risk=lambda epsilon, delta: review.analyst_preview_risk(analyst, epsilon, delta),
    )
    if answer["ok"] and not sees_expected_accuracy(request.user, dataset):
        answer.update(accuracy=[review.ACCURACY_FOR_OWNER], accuracy_table=None)
    return JsonResponse(answer)


@require_GET
def request_plan(request, dataset_pk):
    """The planner for an analyst, against what its allotment can still give (where the
    dataset's row count is public: the planner reads it)."""
    analyst = analyst_for(request.user, dataset_pk)
    dataset = analyst.dataset
    if dataset.is_deleted or not dataset.schema_confirmed:
        return JsonResponse({"ok": False, "errors": ["The dataset's schema is not confirmed."]})
    if not sees_expected_accuracy(request.user, dataset):
        return JsonResponse({"ok": False, "errors": [PLANNER_FOR_OWNER]})
    return JsonResponse(plan_answer(dataset, request.GET, _available(analyst)[0]))
