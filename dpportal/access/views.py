"""Pages that hand out access: a user's API tokens, and invitations to audit a dataset.

A new token's secret is shown once, in the response to the POST that creates it (never put in
a message, a session or a redirect). An invitation link is only in its e-mail; accepting it
creates an account for the invited address (or uses the signed-in one, if its address is the
invited one) and grants auditor access to that dataset, never the custodian grant.
"""

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.validators import ASCIIUsernameValidator
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from dpportal import services
from dpportal.access.credentials import ApiToken
from dpportal.access.rules import NOT_A_CUSTODIAN, dataset_for_owner, may_create_tokens
from dpportal.signals import client_address


class TokenForm(forms.Form):
    name = forms.CharField(
        label="What is this token for?",
        max_length=100,
        help_text="For example “monthly release script”. Shown in the list and the audit log.",
    )


class InvitationForm(forms.Form):
    email = forms.EmailField(label="E-mail address of the person to invite", max_length=254)


@require_http_methods(["GET", "POST"])
def token_list(request):
    """List, create (action=create; custodians and analysts only) and revoke (action=revoke,
    token=<id>) the user's tokens."""
    form, secret, status = TokenForm(), "", 200
    if request.method == "POST" and request.POST.get("action") == "revoke":
        try:
            revoked = services.token_revoke(
                user=request.user,
                token_pk=_int(request.POST.get("token")),
                remote_addr=client_address(request),
            )
        except services.ServiceError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Token {revoked.prefix}… is revoked: it no longer works.")
        return redirect("token_list")
    if request.method == "POST" and not may_create_tokens(request.user):
        raise PermissionDenied(NOT_A_CUSTODIAN)
    if request.method == "POST":
        form = TokenForm(request.POST)
        status = 400
        if form.is_valid():
            try:
                _token, secret = services.token_create(
                    user=request.user,
                    name=form.cleaned_data["name"],
                    remote_addr=client_address(request),
                )
            except services.ServiceError as exc:
                form.add_error(None, str(exc))
            else:
                form, status = TokenForm(), 201
    tokens = ApiToken.objects.filter(user=request.user)
    context = {
        "form": form,
        "secret": secret,
        "tokens": tokens,
        "nav": "tokens",
        "may_create": may_create_tokens(request.user),
    }
    return render(request, "dpportal/access/token_list.html", context, status=status)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


@require_POST
def dataset_invitations(request, pk):
    """The owner sends (action=send, email) or revokes (action=revoke, invitation=<id>)."""
    dataset = dataset_for_owner(request.user, pk)
    try:
        if request.POST.get("action") == "revoke":
            invitation = services.invitation_revoke(
                dataset=dataset,
                user=request.user,
                invitation_pk=_int(request.POST.get("invitation")),
                remote_addr=client_address(request),
            )
            messages.success(request, f"The invitation of {invitation.email} was withdrawn.")
        else:
            _send(request, dataset)
    except services.ServiceError as exc:
        messages.error(request, str(exc))
    return redirect("dataset_detail", pk=dataset.pk)


def _send(request, dataset) -> None:
    form = InvitationForm(request.POST)
    if not form.is_valid():
        raise services.ServiceError("Enter the e-mail address of the person to invite.")
    email = form.cleaned_data["email"]
    services.invitation_send(
        dataset=dataset,
        user=request.user,
        email=email,
        link_for=lambda secret: request.build_absolute_uri(
            reverse("invitation_accept", args=[secret])
        ),
        remote_addr=client_address(request),
    )
    messages.success(
        request,
        f"An invitation was e-mailed to {email}; its link works once, for "
        f"{services.invitations.INVITATION_DAYS} days.",
    )


class InvitedUserForm(UserCreationForm):
    """A new auditor's account. Its name is plain ASCII, so that it cannot pass for another
    account's name written with look-alike letters (Cyrillic а for a)."""

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username",)

    def clean_username(self):
        username = super().clean_username()
        try:
            ASCIIUsernameValidator()(username)
        except ValidationError:
            raise ValidationError(
                "Use only English letters, digits and @ . + - _ in your user name, so that it "
                "cannot be mistaken for someone else's name written with look-alike letters."
            ) from None
        return username


@login_not_required
@require_http_methods(["GET", "POST"])
def invitation_accept(request, secret):
    """Show the invitation; accept it as the signed-in user, or with a new account."""
    try:
        invitation = services.invitation_for_secret(secret)
    except services.ServiceError as exc:
        return render(request, "dpportal/access/invitation.html", {"problem": str(exc)}, status=410)
    signed_in = request.user.is_authenticated
    if signed_in and not services.invitations.same_address(request.user.email, invitation.email):
        problem = services.invitations.OTHER_ADDRESS
        return render(request, "dpportal/access/invitation.html", {"problem": problem}, status=403)
    form = None if signed_in else InvitedUserForm(request.POST or None)
    if request.method == "POST" and (form is None or form.is_valid()):
        try:
            user = _accept(request, secret, form, invitation.email)
        except services.invitations.OtherAddress as exc:
            return render(
                request, "dpportal/access/invitation.html", {"problem": str(exc)}, status=403
            )
        except services.ServiceError as exc:
            return render(
                request, "dpportal/access/invitation.html", {"problem": str(exc)}, status=410
            )
        analyst = services.invitations.analyst_of(invitation)
        role = "an analyst" if analyst else "an auditor"
        messages.success(request, f"You are now {role} of {invitation.dataset.name}.")
        if not signed_in:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        if analyst:
            return redirect("analyst_workspace", dataset_pk=invitation.dataset_id)
        return redirect("dataset_detail", pk=invitation.dataset_id)
    context = {
        "invitation": invitation,
        "analyst": services.invitations.analyst_of(invitation),
        "form": form,
        "login_url": f"{reverse('login')}?next={request.path}",
    }
    return render(
        request,
        "dpportal/access/invitation.html",
        context,
        status=400 if request.method == "POST" else 200,
    )


def _accept(request, secret, form, email):
    """Accept for the signed-in user, or create the account and accept in one transaction (a
    refused invitation leaves no account behind)."""
    with transaction.atomic():
        user = request.user
        if form is not None:
            user = form.save(commit=False)
            user.email = email
            user.save()
        services.invitation_accept(secret=secret, user=user, remote_addr=client_address(request))
    return user
