"""Issue 46, item 1, the services: an analyst's allotment is a reservation on the dataset's
budget (exact in the ledger, returned when revoked), a request spends nothing until approved,
the approval makes the release from the allotment, a declined request spends nothing, a
request beyond the allotment is refused with words, the two-person rule, and every step is an
event of the audit chain.

Budget figures are exact decimals: each test compares the budget's spent total with the signed
sum of its ledger entries (debits and reservations add, refunds and returns subtract).
"""

from decimal import Decimal

import pytest
from django.core import mail

from dpportal import services
from dpportal.models import (
    Analyst,
    AuditEvent,
    BudgetLedgerEntry,
    Dataset,
    Invitation,
    Release,
    ReleaseRequest,
)
from tests.helpers import make_analyst, make_dataset, make_release, make_request, make_user

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """Approved releases are queued, never sent to a broker (these tests run none)."""
    monkeypatch.setattr(services.delivery, "release_send", lambda release_id: False)


def budget_state(dataset):
    """(spent ε, spent δ, signed ledger sums) of the dataset's budget, read fresh."""
    dataset = Dataset.objects.get(pk=dataset.pk)
    entries = BudgetLedgerEntry.objects.filter(dataset__budget_id=dataset.budget_id)
    return (
        dataset.epsilon_spent,
        dataset.delta_spent,
        sum((e.sign * e.epsilon for e in entries), D(0)),
        sum((e.sign * e.delta for e in entries), D(0)),
    )


def assert_ledger_exact(dataset):
    epsilon, delta, ledger_epsilon, ledger_delta = budget_state(dataset)
    assert (epsilon, delta) == (ledger_epsilon, ledger_delta)


def kinds(dataset):
    return list(
        BudgetLedgerEntry.objects.filter(dataset=dataset).values_list("kind", "epsilon", "release")
    )


def approve(request, user, note=""):
    return services.request_decide(release_request=request, user=user, approve=True, note=note)


def test_an_allotment_is_reserved_exactly_in_the_ledger(owner):
    dataset = make_dataset(owner, epsilon_total=1, delta_total="0.00001")
    for name in ("ann", "ben", "cat"):  # 0.1 three times: exactly 0.3 (no float drift)
        make_analyst(dataset, name, epsilon="0.1", delta="0.000001")
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == D("0.3") and dataset.epsilon_remaining == D("0.7")
    assert dataset.delta_spent == D("0.000003")
    entries = BudgetLedgerEntry.objects.filter(dataset=dataset).order_by("pk")
    assert [e.kind for e in entries] == ["reserve"] * 3
    assert [e.epsilon_spent_after for e in entries] == [D("0.1"), D("0.2"), D("0.3")]
    assert all(e.release is None and e.analyst is not None for e in entries)
    assert_ledger_exact(dataset)
    assert [a.epsilon_held for a in Analyst.objects.filter(dataset=dataset)] == [D("0.1")] * 3
    with pytest.raises(services.ServiceError, match=r"needs ε = 0\.8, but only ε = 0\.7 is left"):
        make_release(owner, dataset, epsilon="0.8")  # the owner cannot spend the reservations


def test_an_allotment_that_does_not_fit_reserves_nothing_and_says_why(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    with pytest.raises(
        services.ServiceError,
        match=r"this allotment needs ε = 1\.5, but only ε = 1 is left of 1",
    ):
        make_analyst(dataset, "ann", epsilon="1.5")
    assert not Analyst.objects.exists() and not Invitation.objects.exists()
    assert not BudgetLedgerEntry.objects.exists() and mail.outbox == []
    with pytest.raises(services.ServiceError, match="at most 6 decimal places"):
        make_analyst(dataset, "ann", epsilon="0.1234567")  # never rounded in the ledger


def test_a_request_spends_nothing_and_its_approval_spends_from_the_allotment(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    request = make_request(ann, analyst, epsilon="0.2")
    assert kinds(dataset) == [("reserve", D("0.5"), None)]  # nothing more while it waits
    assert not Release.objects.exists()
    approved = approve(request, owner, note="fine")
    release = approved.release
    assert approved.status == "approved" and release.status == Release.Status.QUEUED
    assert release.requested_by == ann and release.epsilon == D("0.2")
    assert kinds(dataset) == [
        ("reserve", D("0.5"), None),
        ("return", D("0.2"), release.pk),
        ("debit", D("0.2"), release.pk),
    ]
    analyst.refresh_from_db()
    assert analyst.epsilon_held == D("0.3")
    assert budget_state(dataset)[0] == D("0.5")  # reserved then spent: the total did not move
    assert_ledger_exact(dataset)


def test_a_declined_request_spends_nothing(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    before = budget_state(dataset), kinds(dataset)
    request = make_request(ann, analyst, epsilon="0.4")
    declined = services.request_decide(
        release_request=request, user=owner, approve=False, note="too fine-grained"
    )
    assert declined.status == "declined" and declined.release is None
    assert (budget_state(dataset), kinds(dataset)) == before
    assert not Release.objects.exists()
    analyst.refresh_from_db()
    assert analyst.epsilon_held == D("0.5")
    assert declined.decisions.get().note == "too fine-grained"
    make_request(ann, analyst, epsilon="0.5")  # what it asked for is available again


def test_requests_beyond_the_allotment_are_refused_with_words(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.3")
    with pytest.raises(
        services.ServiceError,
        match=r"this request needs ε = 0\.4, but only ε = 0\.3 of your allotment of 0\.3 is left",
    ):
        make_request(ann, analyst, epsilon="0.4")
    make_request(ann, analyst, epsilon="0.2")
    with pytest.raises(
        services.ServiceError, match=r"only ε = 0\.1 .* is left \(your waiting requests ask"
    ):
        make_request(ann, analyst, epsilon="0.2")
    assert ReleaseRequest.objects.count() == 1
    assert kinds(dataset) == [("reserve", D("0.3"), None)]


def test_revoking_returns_what_the_allotment_still_holds(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    approve(make_request(ann, analyst, epsilon="0.2"), owner)
    waiting = make_request(ann, analyst, epsilon="0.1")
    services.analyst_revoke(dataset=dataset, user=owner, analyst_pk=analyst.pk)
    analyst.refresh_from_db()
    assert analyst.revoked_at is not None and analyst.epsilon_held == D("0")
    assert kinds(dataset)[-1] == ("return", D("0.3"), None)
    assert budget_state(dataset)[0] == D("0.2")  # only the release's ε stays spent
    assert_ledger_exact(dataset)
    waiting.refresh_from_db()
    assert waiting.status == "withdrawn"
    with pytest.raises(services.ServiceError, match="access to this dataset was revoked"):
        make_request(ann, analyst, epsilon="0.1")


def test_revoking_a_pending_invitation_returns_its_allotment_and_kills_the_link(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    secrets = []
    analyst = services.analyst_invite(
        dataset=dataset,
        user=owner,
        email="ann@example.org",
        epsilon="0.4",
        delta=0,
        link_for=lambda secret: secrets.append(secret) or "link",
    )
    assert "within a privacy budget of ε = 0.4" in mail.outbox[0].body
    services.analyst_revoke(dataset=dataset, user=owner, analyst_pk=analyst.pk)
    assert budget_state(dataset)[0] == D("0") and kinds(dataset)[-1][0] == "return"
    with pytest.raises(services.ServiceError, match="withdrawn"):
        services.invitation_for_secret(secrets[0])


def test_an_invitation_that_cannot_be_mailed_returns_its_allotment(owner, monkeypatch):
    dataset = make_dataset(owner, epsilon_total=1)

    def refuse(**kwargs):
        raise ConnectionRefusedError("no mail server")

    monkeypatch.setattr(services.invitations, "send_mail", refuse)
    with pytest.raises(services.ServiceError, match="could not be sent"):
        make_analyst(dataset, "ann", epsilon="0.4")
    assert [k for k, _, _ in kinds(dataset)] == ["reserve", "return"]
    assert budget_state(dataset)[0] == D("0")
    assert Analyst.objects.get().revoked_at is not None


def test_a_refunded_release_goes_back_to_the_allotment(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    release = approve(make_request(ann, analyst, epsilon="0.2"), owner).release
    services.release_cancel(release=release, user=owner)  # queued, never read: refunded
    analyst.refresh_from_db()
    assert analyst.epsilon_held == D("0.5")
    assert [k for k, _, _ in kinds(dataset)] == ["reserve", "return", "debit", "refund", "reserve"]
    assert budget_state(dataset)[0] == D("0.5")
    assert_ledger_exact(dataset)
    refunded = AuditEvent.objects.get(action=AuditEvent.Action.RELEASE_REFUNDED)
    assert refunded.details["to_allotment_of"] == "ann"


def test_after_revoking_a_refund_goes_to_the_budget(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    release = approve(make_request(ann, analyst, epsilon="0.2"), owner).release
    services.analyst_revoke(dataset=dataset, user=owner, analyst_pk=analyst.pk)
    services.release_cancel(release=release, user=owner)
    assert budget_state(dataset)[0] == D("0")
    assert_ledger_exact(dataset)


def test_the_two_person_rule_needs_both_approvals(owner, auditor, small_dataset):
    services.second_approver_set(dataset=small_dataset, user=owner, username="auditor")
    ann, analyst = make_analyst(small_dataset, "ann", epsilon="0.5")
    request = make_request(ann, analyst, epsilon="0.2")
    assert request.second_approver == auditor
    first = approve(request, owner)
    assert first.status == "waiting" and first.release is None
    with pytest.raises(services.ServiceError, match="already approved"):
        approve(request, owner)
    for someone in (ann, make_user("stranger")):
        with pytest.raises(services.ServiceError, match="Only the dataset's owner"):
            approve(request, someone)
    second = approve(request, auditor, note="checked the columns")
    assert second.status == "approved" and second.release is not None
    other = make_request(ann, analyst, epsilon="0.1")
    declined = services.request_decide(
        release_request=other, user=auditor, approve=False, note="no"
    )
    assert declined.status == "declined"  # either decider may decline


def test_the_second_approver_is_an_auditor_or_a_custodian_never_the_owner_or_an_analyst(
    owner, small_dataset
):
    make_user("reader", custodian=False)
    ann, _ = make_analyst(small_dataset, "ann")
    for name, says in (
        ("owner", "someone other than you"),
        ("reader", "neither an auditor of this dataset nor a custodian"),
        ("ann", "is an analyst of this dataset"),
        ("nobody", "There is no user 'nobody'"),
    ):
        with pytest.raises(services.ServiceError, match=says):
            services.second_approver_set(dataset=small_dataset, user=owner, username=name)
    make_user("colleague")  # a custodian
    services.second_approver_set(dataset=small_dataset, user=owner, username="colleague")
    services.second_approver_set(dataset=small_dataset, user=owner, username="")
    events = AuditEvent.objects.filter(action=AuditEvent.Action.APPROVER_CHANGED)
    assert [e.details for e in events] == [
        {"before": "", "after": "colleague"},
        {"before": "colleague", "after": ""},
    ]


def test_an_analyst_withdraws_its_own_waiting_request_only(owner, small_dataset):
    ann, analyst = make_analyst(small_dataset, "ann")
    ben, _ = make_analyst(small_dataset, "ben")
    request = make_request(ann, analyst)
    with pytest.raises(services.ServiceError, match="Only the analyst who made"):
        services.request_withdraw(release_request=request, user=ben)
    services.request_withdraw(release_request=request, user=ann)
    request.refresh_from_db()
    assert request.status == "withdrawn"
    with pytest.raises(services.ServiceError, match="already withdrawn"):
        approve(request, owner)


def test_the_same_form_submitted_twice_makes_one_request(owner, small_dataset):
    ann, analyst = make_analyst(small_dataset, "ann")
    first = make_request(ann, analyst, submission_token="nonce-1")
    with pytest.raises(services.DuplicateRequest) as twice:
        make_request(ann, analyst, submission_token="nonce-1")
    assert twice.value.request == first and ReleaseRequest.objects.count() == 1


def test_deleting_the_dataset_revokes_its_analysts_and_returns_their_allotments(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    make_request(ann, analyst)
    services.dataset_delete(dataset=dataset, user=owner)
    analyst.refresh_from_db()
    assert analyst.revoked_at is not None and budget_state(dataset)[0] == D("0")
    assert ReleaseRequest.objects.get().status == "withdrawn"


def test_the_total_cannot_go_below_what_allotments_hold(owner):
    dataset = make_dataset(owner, epsilon_total=1)
    make_analyst(dataset, "ann", epsilon="0.5")
    with pytest.raises(services.ServiceError, match="analysts' allotments hold: ε = 0.5"):
        services.dataset_change_budget(  # before any release too
            dataset=dataset, user=owner, epsilon_total="0.4", delta_total=0
        )
    make_release(owner, dataset, epsilon="0.1")
    with pytest.raises(services.ServiceError, match="analysts' allotments hold: ε = 0.6"):
        services.dataset_change_budget(
            dataset=dataset, user=owner, epsilon_total="0.55", delta_total=0
        )


def test_every_step_is_an_event_of_the_hash_chain(owner, auditor, small_dataset):
    """Who (the actor), what (the request's settings, the decision and its note): invitation,
    joining, request, both approvals, the release, a refusal, a withdrawal, the revocation."""
    services.second_approver_set(dataset=small_dataset, user=owner, username="auditor")
    ann, analyst = make_analyst(small_dataset, "ann", epsilon="0.6")
    request = make_request(ann, analyst, epsilon="0.2", purpose="age by sex for a report")
    approve(request, owner, note="ok by me")
    approve(request, auditor, note="ok too")
    services.request_decide(
        release_request=make_request(ann, analyst), user=auditor, approve=False, note="not now"
    )
    services.request_withdraw(release_request=make_request(ann, analyst), user=ann)
    services.analyst_revoke(dataset=small_dataset, user=owner, analyst_pk=analyst.pk)
    events = list(AuditEvent.objects.filter(dataset=small_dataset).order_by("pk"))
    steps = [(e.action, e.actor_name) for e in events if e.action != "schema_confirmed"]
    assert steps[steps.index(("analyst_invited", "owner")) :] == [
        ("analyst_invited", "owner"),
        ("access_changed", "ann"),
        ("request_submitted", "ann"),
        ("request_approved", "owner"),
        ("release_requested", "ann"),
        ("request_approved", "auditor"),
        ("request_submitted", "ann"),
        ("request_declined", "auditor"),
        ("request_submitted", "ann"),
        ("request_withdrawn", "ann"),
        ("analyst_revoked", "owner"),
    ]
    invited = next(e for e in events if e.action == "analyst_invited")
    assert invited.details == {
        "analyst": f"invitation {analyst.invitation_id}",
        "email": "ann@example.org",
        "epsilon": "0.6",
        "delta": "0",
    }
    decisions = [e.details for e in events if e.action in ("request_approved", "request_declined")]
    assert [(d["role"], d["note"], d["status"]) for d in decisions] == [
        ("owner", "ok by me", "waiting"),
        ("second approver", "ok too", "approved"),
        ("second approver", "not now", "declined"),
    ]
    assert decisions[0]["columns"] == ["age", "sex"] and decisions[0]["epsilon"] == "0.2"
    assert services.audit_verify_chain() == []


def test_the_public_package_states_what_releases_spent_not_the_reservations(owner):
    from dpportal.releases import packaging

    dataset = make_dataset(owner, epsilon_total=1)
    ann, analyst = make_analyst(dataset, "ann", epsilon="0.5")
    approve(make_request(ann, analyst, epsilon="0.2"), owner)
    make_release(owner, dataset, epsilon="0.1")
    dataset.refresh_from_db()
    assert dataset.epsilon_spent == D("0.6")  # 0.3 still reserved, 0.3 spent by releases
    stated = packaging.budget(dataset)
    assert (stated.epsilon_spent, stated.epsilon_total, stated.releases) == ("0.3", "1", 2)
