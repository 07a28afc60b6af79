"""URLs of the analysts' and requests' pages (included from dpportal/urls.py)."""

from django.urls import path

from dpportal.analysts import request_views, views

urlpatterns = [
    path("datasets/<int:pk>/analysts/", views.dataset_analysts, name="dataset_analysts"),
    path("datasets/<int:dataset_pk>/workspace/", views.analyst_workspace, name="analyst_workspace"),
    path("datasets/<int:pk>/requests/", request_views.dataset_requests, name="dataset_requests"),
    path("datasets/<int:dataset_pk>/requests/new/", views.request_new, name="request_new"),
    path(
        "datasets/<int:dataset_pk>/requests/preview/",
        views.request_preview,
        name="request_preview",
    ),
    path("datasets/<int:dataset_pk>/requests/plan/", views.request_plan, name="request_plan"),
    path("requests/<int:pk>/", request_views.request_detail, name="request_detail"),
    path("requests/<int:pk>/decide/", request_views.request_decide, name="request_decide"),
    path("requests/<int:pk>/withdraw/", request_views.request_withdraw, name="request_withdraw"),
    path(
        "requests/<int:pk>/package.zip",
        request_views.request_download_zip,
        name="request_download_zip",
    ),
    path(
        "requests/<int:pk>/files/<str:filename>",
        request_views.request_download_file,
        name="request_download_file",
    ),
]
