from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dpportal.access import views as access_views
from dpportal.access.login_limit import LimitedPasswordChangeView, rate_limited
from dpportal.audit import views as audit_views
from dpportal.core import views

urlpatterns = [
    path("", views.home, name="home"),
    path("", include("dpportal.releases.urls")),
    path("", include("dpportal.datasets.urls")),
    path("", include("dpportal.records.urls")),
    path("", include("dpportal.analysts.urls")),
    path("releases/", audit_views.release_list, name="release_list"),
    path("releases.csv", audit_views.release_list_csv, name="release_list_csv"),
    path("datasets/<int:pk>/ledger/", audit_views.dataset_ledger, name="dataset_ledger"),
    path("datasets/<int:pk>/ledger.csv", audit_views.dataset_ledger_csv, name="dataset_ledger_csv"),
    path("audit/", audit_views.audit_log, name="audit_log"),
    path("audit.csv", audit_views.audit_log_csv, name="audit_log_csv"),
    path("accounts/login/", rate_limited(auth_views.LoginView.as_view()), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password/",
        LimitedPasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("healthz", views.healthz, name="healthz"),
    path("account/tokens/", access_views.token_list, name="token_list"),
    path("invitations/<str:secret>/", access_views.invitation_accept, name="invitation_accept"),
    path("api/v1/", include("dpportal.api.urls")),
    path("admin/login/", rate_limited(admin.site.login)),
    path("admin/", admin.site.urls),
]

handler400 = "dpportal.core.error_views.bad_request"
handler404 = "dpportal.core.error_views.page_not_found"
handler500 = "dpportal.core.error_views.server_error"
