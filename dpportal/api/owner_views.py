"""API endpoints of an owner's other actions on a dataset: its budget, its auditors, invitations
and deletion. Each goes through the page's form and service; only the owner reaches them
(auditors and everyone else get 404)."""

from django.http import JsonResponse
from django.urls import reverse

from dpportal import services
from dpportal.access.rules import dataset_for_owner
from dpportal.access.views import InvitationForm
from dpportal.api.auth import ApiError, api_endpoint, form_data, invalid, read_json
from dpportal.api.present import dataset_json, when
from dpportal.datasets.forms import AuditorForm, BudgetForm, DeleteForm
from dpportal.signals import client_address


def _valid(form):
    if not form.is_valid():
        raise invalid(form)
    return form.cleaned_data


@api_endpoint("POST")
def dataset_budget(request, pk):
    """Change the total ε and δ, or the neighbouring relation (the page's budget form)."""
    dataset = dataset_for_owner(request.user, pk)
    data = _valid(BudgetForm(form_data(read_json(request), BudgetForm.base_fields)))
    services.dataset_change_budget(
        dataset=dataset, user=request.user, remote_addr=client_address(request), **data
    )
    dataset.refresh_from_db()
    return JsonResponse(dataset_json(dataset, request.user))


def _access(dataset) -> dict:
    return {
        "auditors": [u.get_username() for u in dataset.auditors.order_by("username")],
        "invitations": [
            {
                "id": invitation.pk,
                "email": invitation.email,
                "created_at": when(invitation.created_at, exact=True),
                "expires_at": when(invitation.expires_at, exact=True),
            }
            for invitation in services.pending_invitations(dataset)
        ],
    }


@api_endpoint("GET", "POST")
def dataset_auditors(request, pk):
    """GET: who has access (auditors, pending invitations). POST {"username", "action":
    "add"|"remove"}: give or take away an existing user's access."""
    dataset = dataset_for_owner(request.user, pk)
    if request.method == "POST":
        body = read_json(request)
        action = body.pop("action", "add")
        if action not in ("add", "remove"):
            raise ApiError(400, "action: give 'add' or 'remove'.")
        data = _valid(AuditorForm(form_data(body, AuditorForm.base_fields)))
        services.dataset_set_auditor(
            dataset=dataset,
            user=request.user,
            add=action == "add",
            username=data["username"].strip(),
            remote_addr=client_address(request),
        )
    return JsonResponse(_access(dataset))


@api_endpoint("POST")
def dataset_invitations(request, pk):
    """{"email"}: e-mail an invitation to audit the dataset; {"revoke": id}: withdraw one."""
    dataset = dataset_for_owner(request.user, pk)
    body = read_json(request)
    if "revoke" in body:
        form_data(body, ("revoke",))
        if not isinstance(body["revoke"], int):
            raise ApiError(400, "revoke: give the invitation's id (a whole number).")
        services.invitation_revoke(
            dataset=dataset,
            user=request.user,
            invitation_pk=body["revoke"],
            remote_addr=client_address(request),
        )
        return JsonResponse(_access(dataset))
    data = _valid(InvitationForm(form_data(body, InvitationForm.base_fields)))
    services.invitation_send(
        dataset=dataset,
        user=request.user,
        email=data["email"],
        link_for=lambda secret: request.build_absolute_uri(
            reverse("invitation_accept", args=[secret])
        ),
        remote_addr=client_address(request),
    )
    return JsonResponse(_access(dataset), status=201)


@api_endpoint("POST")
def dataset_delete(request, pk):
    """{"confirm_name": the dataset's name}: remove its stored files and withdraw its public
    pages (releases and audit stay); the answer counts the pages withdrawn."""
    dataset = dataset_for_owner(request.user, pk)
    body = read_json(request)
    _valid(DeleteForm(form_data(body, DeleteForm.base_fields), dataset=dataset))
    withdrawn = services.public_pages(dataset).count()
    services.dataset_delete(dataset=dataset, user=request.user, remote_addr=client_address(request))
    dataset.refresh_from_db()
    return JsonResponse(dataset_json(dataset, request.user) | {"public_pages_withdrawn": withdrawn})
