"""Who may see what and who may do what.

Object views answer 404 to users without access (never 403). Holding data is a separate,
explicit grant: only custodians (the permission dpportal.custodian, through the group
"Custodians") may upload or register a dataset or create an API token; an account made from an
invitation to audit has no grant and reads only the datasets it audits. Custodian-only pages
answer 403 with words.

Analysts (dpportal/analysts) are invited to one dataset with an allotment: an active analyst
sees that dataset's public metadata (its workspace, never the owner's or auditors' dataset
pages), its own requests and the public packages of their releases, never another analyst's
requests; it may create API tokens. A dataset's requests are read by its owner, its auditors
and the second approver each request names; the owner and that approver decide.
"""

import functools

from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404

from dpportal.models import Analyst, Dataset, Neighbouring, Release, ReleaseRequest
from mechanisms.persons import PERSON_ROLE

# Facts about a dataset's raw file (and a failed release's reason, which can quote the data).
RAW_FACTS = frozenset({"row_count", "size_bytes", "sha256", "original_filename", "failure_reason"})
PUBLIC_UNDER_REPLACE_ONE = frozenset({"row_count"})
CUSTODIAN_PERMISSION = "dpportal.custodian"
CUSTODIANS_GROUP = "Custodians"
NOT_A_CUSTODIAN = (
    "Only custodians can upload or register datasets and create API tokens. Your account can "
    "read the datasets you were invited to audit; to hold datasets of your own, ask the "
    "portal's operator to make you a custodian."
)


def is_custodian(user) -> bool:
    """Whether `user` holds the custodian grant (superusers hold every permission)."""
    return user.is_authenticated and user.has_perm(CUSTODIAN_PERMISSION)


def custodian_required(view):
    """Wrap a view that only custodians may reach: anyone else gets 403 with NOT_A_CUSTODIAN
    before the request body is read."""

    @functools.wraps(view)
    def checked(request, *args, **kwargs):
        if request.user.is_authenticated and not is_custodian(request.user):
            raise PermissionDenied(NOT_A_CUSTODIAN)
        return view(request, *args, **kwargs)

    return checked


def grant_custodian(user) -> None:
    """Make `user` a custodian (an operator's explicit act: the admin, `grant_custodian`)."""
    group, _ = Group.objects.get_or_create(name=CUSTODIANS_GROUP)
    group.permissions.add(
        Permission.objects.get(content_type__app_label="dpportal", codename="custodian")
    )
    user.groups.add(group)


def datasets_visible_to(user):
    """Datasets the user owns or audits."""
    return Dataset.objects.filter(Q(owner=user) | Q(auditors=user)).distinct()


def releases_visible_to(user):
    return Release.objects.filter(Q(dataset__owner=user) | Q(dataset__auditors=user)).distinct()


def dataset_for_owner(user, pk):
    """The dataset if `user` owns it; otherwise 404 (auditors and strangers alike)."""
    dataset = Dataset.objects.filter(pk=pk, owner=user).first()
    if dataset is None:
        raise Http404("No such dataset.")
    return dataset


def dataset_for_reader(user, pk):
    """The dataset if `user` owns or audits it; otherwise 404."""
    dataset = datasets_visible_to(user).filter(pk=pk).first()
    if dataset is None:
        raise Http404("No such dataset.")
    return dataset


def is_owner(user, dataset: Dataset | None) -> bool:
    """Whether `user` owns `dataset` (never for no dataset, as of a sign-in event). Owners see
    exact times; everyone else sees them cut to the minute (dpportal/access/timing.py)."""
    return dataset is not None and dataset.owner_id == user.pk


def facts_visible_to(user, dataset) -> frozenset[str]:
    """Which raw-data facts of `dataset` the user may see: the one rule for every page, export
    and audit-log detail.

    Privacy: the owner (custodian) sees all of RAW_FACTS. The file's size in bytes, its SHA-256,
    its name and a failure's reason are the owner's only under every neighbouring relation (the
    hash confirms a guessed file, the size tracks the row count, a reason can quote values).
    The row count n is private under add-remove (even whether a person is in the table is
    protected) and public by definition under replace-one, where auditors may see it. Users
    who neither own nor audit the dataset see nothing. With a person column (one person, many
    rows) the row count is private under both relations: replacing a person changes it.
    """
    if not user.is_authenticated:
        return frozenset()
    if dataset.owner_id == user.pk:
        return RAW_FACTS
    if row_count_is_public(dataset) and dataset.auditors.filter(pk=user.pk).exists():
        return PUBLIC_UNDER_REPLACE_ONE
    return frozenset()


def row_count_is_public(dataset) -> bool:
    """Whether the number of rows is a public fact: replace-one neighbours without a person
    column. Under add-remove it is private; with a person column too (replacing one person
    changes it). Defaults that end up in a public artifact may read it only when this holds."""
    return dataset.neighbouring == Neighbouring.REPLACE_ONE and not has_person_column(dataset)


def has_person_column(dataset) -> bool:
    """Whether the dataset's schema names a person column (mechanisms.persons)."""
    columns = (dataset.schema or {}).get("columns") or []
    return any(isinstance(c, dict) and c.get("role") == PERSON_ROLE for c in columns)


def raw_facts(user, dataset) -> dict:
    """The dataset's raw-file facts the user may see, by field name (the others are absent)."""
    return {
        name: getattr(dataset, name)
        for name in facts_visible_to(user, dataset)
        if name != "failure_reason"
    }


# ---------------------------------------------------------------- analysts and their requests


def active_analysts(user):
    """The user's analyst memberships that are in force (joined, not revoked)."""
    if not user.is_authenticated:
        return Analyst.objects.none()
    return Analyst.objects.filter(user=user, revoked_at__isnull=True).select_related("dataset")


def analyst_for(user, dataset_pk) -> Analyst:
    """The user's active membership of this dataset; otherwise 404 (owners included)."""
    analyst = active_analysts(user).filter(dataset_id=dataset_pk).first()
    if analyst is None:
        raise Http404("No such dataset.")
    return analyst


def may_create_tokens(user) -> bool:
    """Custodians, and analysts (whose requests the API takes like the pages)."""
    return is_custodian(user) or active_analysts(user).exists()


def requests_visible_to(user):
    """Requests the user may read: all of the datasets it owns or audits, those naming it as
    second approver, and its own while it is an analyst of their dataset."""
    if not user.is_authenticated:
        return ReleaseRequest.objects.none()
    own = Q(requested_by=user, analyst__user=user, analyst__revoked_at__isnull=True)
    readers = Q(dataset__owner=user) | Q(dataset__auditors=user) | Q(second_approver=user)
    return ReleaseRequest.objects.filter(readers | own).distinct()


def request_for_reader(user, pk) -> ReleaseRequest:
    """The request if the user may read it; otherwise 404."""
    related = ("dataset__owner", "requested_by", "second_approver", "analyst", "release")
    request = requests_visible_to(user).filter(pk=pk).select_related(*related).first()
    if request is None:
        raise Http404("No such request.")
    return request


def request_for_decider(user, pk) -> ReleaseRequest:
    """The request if the user is one of its deciders (the dataset's owner, the request's
    second approver); otherwise 404, before anything of the request is read."""
    request = request_for_reader(user, pk)
    if user.pk not in (request.dataset.owner_id, request.second_approver_id):
        raise Http404("No such request.")
    return request


def request_for_requester(user, pk) -> ReleaseRequest:
    """The request if the user made it (and is still an analyst of its dataset); otherwise 404."""
    request = request_for_reader(user, pk)
    if request.requested_by_id != user.pk:
        raise Http404("No such request.")
    return request


def dataset_for_requests(user, pk) -> Dataset:
    """The dataset if the user has any part in its requests (owner, auditor, its second
    approver, an active analyst of it); otherwise 404."""
    dataset = Dataset.objects.filter(pk=pk).first()
    if dataset is None or not (
        dataset.owner_id == user.pk
        or dataset.second_approver_id == user.pk
        or dataset.auditors.filter(pk=user.pk).exists()
        or active_analysts(user).filter(dataset=dataset).exists()
        or dataset.release_requests.filter(second_approver=user).exists()
    ):
        raise Http404("No such dataset.")
    return dataset


def may_decide(user, request) -> bool:
    """Whether the user may approve or decline the request now: it waits, the user is the
    dataset's owner or the request's second approver, did not make it and has not decided."""
    return (
        request.is_waiting
        and user.pk in (request.dataset.owner_id, request.second_approver_id)
        and user.pk != request.requested_by_id
        and not request.decisions.filter(user=user).exists()
    )


def requests_waiting_for(user):
    """Waiting requests the user (owner or second approver) has still to decide on."""
    if not user.is_authenticated:
        return ReleaseRequest.objects.none()
    deciders = Q(dataset__owner=user) | Q(second_approver=user)
    return (
        ReleaseRequest.objects.filter(deciders, status=ReleaseRequest.Status.WAITING)
        .exclude(requested_by=user)
        .exclude(decisions__user=user)
        .select_related("dataset", "requested_by")
        .distinct()
    )


def sees_expected_accuracy(user, dataset) -> bool:
    """Whether the user may see a release's predicted accuracy on this dataset: the preview
    reads the stored row count, so only the owner, unless that count is public."""
    return is_owner(user, dataset) or row_count_is_public(dataset)
