"""URLs of the public record (included from dpportal/urls.py)."""

from django.urls import path

from dpportal.records import views
from mechanisms.public_record import RECORD, SIGNATURE

urlpatterns = [
    path(
        "datasets/<int:pk>/public-record/",
        views.dataset_public_record,
        name="dataset_public_record",
    ),
    path(
        "public/datasets/<int:dataset_pk>/record.zip",
        views.public_record_zip,
        name="public_record_zip",
    ),
    path(
        f"public/datasets/<int:dataset_pk>/{RECORD}",
        views.public_record_file,
        {"name": RECORD},
        name="public_record_json",
    ),
    path(
        f"public/datasets/<int:dataset_pk>/{SIGNATURE}",
        views.public_record_file,
        {"name": SIGNATURE},
        name="public_record_sig",
    ),
    path("public/record-key/", views.public_record_key, name="public_record_key"),
]
