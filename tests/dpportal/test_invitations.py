"""Invitations (dpportal/services/invitations.py): an owner invites an auditor by e-mail; the
link (stored only as a hash) creates the account or uses the signed-in one, works once,
expires, can be withdrawn; the owner sees who has access; every step is in the audit log."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dpportal import services
from dpportal.credentials import Invitation
from dpportal.models import AuditEvent
from tests.helpers import PASSWORD, client_for, make_user

pytestmark = [pytest.mark.database, pytest.mark.django_db]
NEW_PASSWORD = "a long and unusual passphrase 42"


def invite(owner, dataset, email="erin@example.org"):
    response = client_for(owner).post(
        reverse("dataset_invitations", args=[dataset.pk]), {"action": "send", "email": email}
    )
    assert response.status_code == 302
    return re.search(r"http://testserver(/invitations/[^/\s]+/)", mail.outbox[-1].body).group(1)


def sign_up(link, username="erin"):
    client = Client()
    response = client.post(
        link, {"username": username, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    )
    return client, response


def test_an_invitation_creates_the_account_and_grants_auditor_access(owner, dataset):
    link = invite(owner, dataset)
    assert mail.outbox[-1].to == ["erin@example.org"] and dataset.name in mail.outbox[-1].subject
    secret = link.split("/")[2]
    assert not Invitation.objects.filter(digest=secret).exists()  # only its hash is stored
    page = Client().get(link)
    assert page.status_code == 200 and dataset.name in page.content.decode()

    client, response = sign_up(link)
    assert response.status_code == 302 and response["Location"] == reverse(
        "dataset_detail", args=[dataset.pk]
    )
    erin = get_user_model().objects.get(username="erin")
    assert erin.email == "erin@example.org"
    assert dataset.auditors.filter(pk=erin.pk).exists()
    assert client.get(response["Location"]).status_code == 200  # signed in, and may read it
    assert client.get(reverse("dataset_schema", args=[dataset.pk])).status_code == 404
    granted = AuditEvent.objects.get(action="access_changed", dataset=dataset)
    assert granted.details["auditor"] == "erin" and granted.details["change"] == "added"
    assert AuditEvent.objects.filter(action="invitation_sent", dataset=dataset).count() == 1


def test_an_invitation_works_once(owner, dataset):
    link = invite(owner, dataset)
    sign_up(link)
    again = Client().get(link)
    assert again.status_code == 410 and "already used" in again.content.decode()
    _client, second = sign_up(link, username="mallory")
    assert second.status_code == 410
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_an_expired_invitation_is_refused(owner, dataset):
    link = invite(owner, dataset)
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    _client, response = sign_up(link)
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert not dataset.auditors.exists()
    assert not get_user_model().objects.filter(username="erin").exists()


def test_invitations_expire_after_seven_days(owner, dataset):
    invite(owner, dataset)
    invitation = Invitation.objects.get()
    lifetime = invitation.expires_at - invitation.created_at
    assert timedelta(days=7) - timedelta(seconds=5) < lifetime <= timedelta(days=7)


def test_a_withdrawn_invitation_stops_working_and_is_audited(owner, dataset):
    link = invite(owner, dataset)
    page = client_for(owner).get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert "erin@example.org" in page  # the owner sees who is invited
    invitation = Invitation.objects.get()
    client_for(owner).post(
        reverse("dataset_invitations", args=[dataset.pk]),
        {"action": "revoke", "invitation": invitation.pk},
    )
    response = Client().get(link)
    assert response.status_code == 410 and "withdrawn" in response.content.decode()
    assert AuditEvent.objects.filter(action="invitation_revoked", dataset=dataset).exists()
    page = client_for(owner).get(reverse("dataset_detail", args=[dataset.pk])).content.decode()
    assert "erin@example.org" not in page


def test_a_signed_in_user_links_their_existing_account(owner, dataset):
    link = invite(owner, dataset)
    frank = make_user("frank", PASSWORD)
    response = client_for(frank).post(link)
    assert response.status_code == 302
    assert dataset.auditors.filter(pk=frank.pk).exists()
    assert get_user_model().objects.count() == 2  # no new account


def test_only_the_owner_can_invite_or_withdraw(owner, dataset, auditor, stranger):
    url = reverse("dataset_invitations", args=[dataset.pk])
    for user in (auditor, stranger):
        response = client_for(user).post(url, {"action": "send", "email": "x@example.org"})
        assert response.status_code == 404
    assert not mail.outbox and not Invitation.objects.exists()


def test_an_invitation_counts_as_auditor_access_for_the_budget_rules(owner, dataset):
    """Under replace-one an auditor may have seen the row count: once one joined by
    invitation, the relation can no longer become add-remove (as when added by name)."""
    sign_up(invite(owner, dataset))
    dataset.auditors.clear()  # removed again: they may still remember what they saw
    with pytest.raises(services.ServiceError, match="auditors have already"):
        services.dataset_change_budget(
            dataset=dataset,
            user=owner,
            epsilon_total=dataset.epsilon_total,
            delta_total=dataset.delta_total,
            neighbouring="add-remove",
        )


def test_a_failing_mail_server_leaves_nothing_pending(owner, dataset, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens there
    response = client_for(owner).post(
        reverse("dataset_invitations", args=[dataset.pk]),
        {"action": "send", "email": "erin@example.org"},
        follow=True,
    )
    assert "could not be sent" in response.content.decode()
    assert not services.pending_invitations(dataset).exists()


def test_a_bad_address_is_refused_with_a_message(owner, dataset):
    response = client_for(owner).post(
        reverse("dataset_invitations", args=[dataset.pk]),
        {"action": "send", "email": "not an address"},
        follow=True,
    )
    assert "Enter the e-mail address" in response.content.decode()
    assert not Invitation.objects.exists()
