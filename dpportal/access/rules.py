"""Who may see what and who may do what.

Object views answer 404 to users without access (never 403). Holding data is a separate,
explicit grant: only custodians (the permission dpportal.custodian, through the group
"Custodians") may upload or register a dataset or create an API token; an account made from an
invitation to audit has no grant and reads only the datasets it audits. Custodian-only pages
answer 403 with words.
"""

import functools

from django.contrib.auth.models import Group, Permission
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404

from dpportal.models import Dataset, Neighbouring, Release
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
