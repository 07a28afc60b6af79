"""URLs of the API (included under api/v1/ from dpportal/urls.py); described in api.openapi."""

from django.urls import path

from dpportal.api import dataset_views, openapi, owner_views, release_views, request_views

urlpatterns = [
    path("openapi.json", openapi.openapi_json, name="api_openapi"),
    path("datasets/", dataset_views.datasets, name="api_dataset_list"),
    path("datasets/<int:pk>/", dataset_views.dataset_detail, name="api_dataset_detail"),
    path("datasets/<int:pk>/schema/", dataset_views.dataset_schema, name="api_dataset_schema"),
    path("datasets/<int:pk>/preview/", dataset_views.dataset_preview, name="api_dataset_preview"),
    path("datasets/<int:pk>/plan/", dataset_views.dataset_plan, name="api_dataset_plan"),
    path("datasets/<int:pk>/ledger/", dataset_views.dataset_ledger, name="api_dataset_ledger"),
    path("datasets/<int:pk>/budget/", owner_views.dataset_budget, name="api_dataset_budget"),
    path("datasets/<int:pk>/auditors/", owner_views.dataset_auditors, name="api_dataset_auditors"),
    path(
        "datasets/<int:pk>/invitations/",
        owner_views.dataset_invitations,
        name="api_dataset_invitations",
    ),
    path("datasets/<int:pk>/delete/", owner_views.dataset_delete, name="api_dataset_delete"),
    path(
        "datasets/<int:pk>/releases/",
        release_views.dataset_releases,
        name="api_dataset_releases",
    ),
    path("releases/<int:pk>/", release_views.release_detail, name="api_release_detail"),
    path("releases/<int:pk>/cancel/", release_views.release_cancel, name="api_release_cancel"),
    path(
        "releases/<int:pk>/files/<str:filename>",
        release_views.release_file,
        name="api_release_file",
    ),
    path(
        "releases/<int:pk>/package.zip", release_views.release_package, name="api_release_package"
    ),
    path("audit/", release_views.audit_log, name="api_audit_log"),
    path(
        "datasets/<int:pk>/analysts/",
        request_views.dataset_analysts,
        name="api_dataset_analysts",
    ),
    path(
        "datasets/<int:pk>/requests/",
        request_views.dataset_requests,
        name="api_dataset_requests",
    ),
    path(
        "datasets/<int:dataset_pk>/workspace/",
        request_views.analyst_workspace,
        name="api_analyst_workspace",
    ),
    path(
        "datasets/<int:dataset_pk>/requests/preview/",
        request_views.request_preview,
        name="api_request_estimate",
    ),
    path("requests/<int:pk>/", request_views.request_detail, name="api_request_detail"),
    path("requests/<int:pk>/decide/", request_views.request_decide, name="api_request_decide"),
    path(
        "requests/<int:pk>/withdraw/", request_views.request_withdraw, name="api_request_withdraw"
    ),
    path(
        "requests/<int:pk>/package.zip", request_views.request_package, name="api_request_package"
    ),
    path(
        "requests/<int:pk>/files/<str:filename>",
        request_views.request_file,
        name="api_request_file",
    ),
]
