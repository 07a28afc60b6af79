from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("", include("dpportal.release_urls")),
    path("", include("dpportal.dataset_urls")),
    path("releases/", views.release_list, name="release_list"),
    path("audit/", views.audit_log, name="audit_log"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
]
