"""Invitations (dpportal/services/invitations.py): an owner invites an auditor by e-mail; the
link (stored only as a hash) creates the account or uses the signed-in one whose address is the
invited one, works once, expires, can be withdrawn; the owner sees who has access; every step is
in the audit log. An account made from an invitation is an auditor, not a custodian (issue 41,
item 13): it cannot upload, register sources or create tokens."""

import io
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dpportal import services
from dpportal.access.credentials import Invitation
from dpportal.access.rules import is_custodian
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


def user_with_address(username, email):
    user = make_user(username, PASSWORD, custodian=False)
    user.email = email
    user.save(update_fields=["email"])
    return user


@pytest.mark.parametrize(
    "address", ["erin@example.org", "Erin@EXAMPLE.org", "ｅｒｉｎ@example.org"]
)
def test_a_signed_in_user_with_the_invited_address_links_their_account(owner, dataset, address):
    """The same address in another case or in fullwidth letters (equal after NFKC) matches."""
    link = invite(owner, dataset)
    frank = user_with_address("frank", address)
    response = client_for(frank).post(link)
    assert response.status_code == 302
    assert dataset.auditors.filter(pk=frank.pk).exists()
    assert get_user_model().objects.count() == 2  # no new account


@pytest.mark.parametrize(
    "address",
    [
        "",  # no address at all
        "frank@example.org",  # someone else
        "\u0435rin@example.org",  # Cyrillic е: a look-alike, not the same address
        "erin@example.org.evil.example",
    ],
)
def test_a_signed_in_user_with_another_address_is_refused_and_granted_nothing(
    owner, dataset, address
):
    link = invite(owner, dataset)
    frank = user_with_address("frank", address)
    client = client_for(frank)
    page = client.get(link)
    assert page.status_code == 403 and "another e-mail address" in page.content.decode()
    assert "Accept as" not in page.content.decode()
    response = client.post(link)
    assert response.status_code == 403 and "nothing was granted" in response.content.decode()
    assert not dataset.auditors.filter(pk=frank.pk).exists()
    assert services.pending_invitations(dataset).count() == 1  # still usable by erin
    assert not AuditEvent.objects.filter(action="access_changed").exists()


def test_the_service_refuses_another_address_too(owner, dataset):
    """The binding is in the service, not only in the page."""
    link = invite(owner, dataset)
    frank = user_with_address("frank", "frank@example.org")
    with pytest.raises(services.ServiceError, match="another e-mail address"):
        services.invitation_accept(secret=link.split("/")[2], user=frank)
    assert not dataset.auditors.filter(pk=frank.pk).exists()


def test_an_invited_account_is_an_auditor_not_a_custodian(owner, dataset):
    """It reads the dataset it was invited to; it cannot upload, register a source or create
    a token (page or API), and is told why."""
    client, _response = sign_up(invite(owner, dataset))
    erin = get_user_model().objects.get(username="erin")
    assert not erin.has_perm("dpportal.custodian")
    assert client.get(reverse("dataset_detail", args=[dataset.pk])).status_code == 200
    for name in ("dataset_upload", "dataset_register_source"):
        for response in (client.get(reverse(name)), client.post(reverse(name), {"name": "x"})):
            assert response.status_code == 403, name
            assert "Only custodians" in response.content.decode()
    home = client.get(reverse("home")).content.decode()
    assert reverse("dataset_upload") not in home
    refused = client.post(reverse("token_list"), {"action": "create", "name": "script"})
    assert refused.status_code == 403 and not erin.api_tokens.exists()
    _token, secret = services.token_create(user=erin, name="given by hand")  # not via the page
    api = Client(HTTP_AUTHORIZATION=f"Bearer {secret}").post(
        reverse("api_dataset_list"), {"name": "x"}
    )
    assert api.status_code == 403 and "Only custodians" in api.json()["error"]


def test_a_look_alike_user_name_is_refused(owner, dataset):
    """A new account's name is plain ASCII: "оwner" with a Cyrillic о cannot pass for owner."""
    link = invite(owner, dataset)
    _client, response = sign_up(link, username="\u043ewner")
    assert response.status_code == 400 and "look-alike" in response.content.decode()
    assert get_user_model().objects.count() == 1 and not dataset.auditors.exists()


def test_the_operator_grants_and_revokes_the_custodian_role(owner, dataset):
    sign_up(invite(owner, dataset))
    erin = get_user_model().objects.get(username="erin")
    call_command("grant_custodian", "erin", stdout=io.StringIO())
    erin = get_user_model().objects.get(pk=erin.pk)  # permissions are cached per object
    assert client_for(erin).get(reverse("dataset_upload")).status_code == 200
    call_command("grant_custodian", "erin", "--revoke", stdout=io.StringIO())
    erin = get_user_model().objects.get(pk=erin.pk)
    assert client_for(erin).get(reverse("dataset_upload")).status_code == 403
    with pytest.raises(CommandError, match="no account named"):
        call_command("grant_custodian", "nobody")


def test_superusers_and_the_demo_user_are_custodians():
    admin = get_user_model().objects.create_superuser("root", "root@example.org", PASSWORD)
    assert is_custodian(admin)
    call_command("load_demo", stdout=io.StringIO())
    assert is_custodian(get_user_model().objects.get(username="demo"))


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


BEFORE_GRANT = ("dpportal", "0011_shared_budget_declaration")
GRANT = ("dpportal", "0012_custodian_grant")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_accounts_that_existed_before_the_grant_keep_being_custodians():
    apps = migrate(BEFORE_GRANT)
    apps.get_model("auth", "User").objects.create(username="olga")
    try:
        migrate(GRANT)
        olga = get_user_model().objects.get(username="olga")
        assert is_custodian(olga)
        newcomer = get_user_model().objects.create_user("newcomer")
        assert not is_custodian(newcomer)  # accounts made later get it only by a grant
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
