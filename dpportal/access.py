"""Who may see what. Object views answer 404 to users without access (never 403)."""

from django.db.models import Q
from django.http import Http404

from .models import Dataset, Release


def datasets_visible_to(user):
    """Datasets the user owns or audits."""
    return Dataset.objects.filter(Q(owner=user) | Q(auditors=user)).distinct()


def releases_visible_to(user):
    return Release.objects.filter(
        Q(dataset__owner=user) | Q(dataset__auditors=user)
    ).distinct()


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


def is_owner(user, dataset) -> bool:
    return dataset.owner_id == user.pk
