"""URLs of the release pages (included from dpportal/urls.py)."""

from django.urls import path

from dpportal.releases import public_views, views

urlpatterns = [
    path("datasets/<int:dataset_pk>/releases/new/", views.release_new, name="release_new"),
    path(
        "datasets/<int:dataset_pk>/releases/preview/",
        views.release_preview,
        name="release_preview",
    ),
    path("datasets/<int:dataset_pk>/releases/plan/", views.release_plan, name="release_plan"),
    path("releases/<int:pk>/", views.release_detail, name="release_detail"),
    path("releases/<int:pk>/progress/", views.release_progress, name="release_progress"),
    path("releases/<int:pk>/cancel/", views.release_cancel, name="release_cancel"),
    path(
        "releases/<int:pk>/download/package.zip",
        views.release_download_zip,
        name="release_download_zip",
    ),
    path(
        "releases/<int:pk>/download/<str:filename>",
        views.release_download_file,
        name="release_download_file",
    ),
    path(
        "releases/<int:pk>/utility-report.html",
        views.release_utility_report,
        name="release_utility_report",
    ),
    path("releases/<int:pk>/public/", public_views.release_public_switch, name="release_public"),
    path("public/releases/<int:pk>/", public_views.public_release, name="public_release"),
    path(
        "public/releases/<int:pk>/<str:filename>",
        public_views.public_release_file,
        name="public_release_file",
    ),
    path("public/report.css", public_views.public_report_css, name="public_report_css"),
]
