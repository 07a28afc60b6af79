"""URLs of the dataset pages (included from dpportal/urls.py)."""

from django.urls import path

from dpportal.access import views as access_views
from dpportal.access.rules import custodian_required
from dpportal.datasets import budget_views, dp_estimate_views, publishing_views, views
from dpportal.sources import views as source_views

urlpatterns = [
    path("datasets/new/", custodian_required(views.dataset_upload), name="dataset_upload"),
    path(
        "datasets/new/source/",
        custodian_required(source_views.dataset_register_source),
        name="dataset_register_source",
    ),
    path("datasets/<int:pk>/", views.dataset_detail, name="dataset_detail"),
    path("datasets/<int:pk>/schema/", views.dataset_schema, name="dataset_schema"),
    path(
        "datasets/<int:pk>/schema/dp-estimate/",
        dp_estimate_views.dataset_dp_estimate,
        name="dataset_dp_estimate",
    ),
    path("datasets/<int:pk>/budget/", views.dataset_budget, name="dataset_budget"),
    path(
        "datasets/<int:pk>/budget/same-people/",
        budget_views.dataset_budget_join,
        name="dataset_budget_join",
    ),
    path("datasets/<int:pk>/auditors/", views.dataset_auditors, name="dataset_auditors"),
    path(
        "datasets/<int:pk>/publishing/",
        publishing_views.dataset_publishing,
        name="dataset_publishing",
    ),
    path("datasets/<int:pk>/delete/", views.dataset_delete, name="dataset_delete"),
    path(
        "datasets/<int:pk>/invitations/",
        access_views.dataset_invitations,
        name="dataset_invitations",
    ),
]
