"""Record logins, failed logins and logouts in the audit log."""

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from .models import AuditEvent
from .services import audit_record


def client_address(request):
    return request.META.get("REMOTE_ADDR") if request is not None else None


@receiver(user_logged_in)
def audit_login(sender, request, user, **kwargs):
    audit_record(action=AuditEvent.Action.LOGIN, actor=user, remote_addr=client_address(request))


@receiver(user_logged_out)
def audit_logout(sender, request, user, **kwargs):
    if user is not None:
        audit_record(action=AuditEvent.Action.LOGOUT, actor=user,
                     remote_addr=client_address(request))


@receiver(user_login_failed)
def audit_login_failed(sender, credentials, request=None, **kwargs):
    audit_record(
        action=AuditEvent.Action.LOGIN_FAILED,
        details={"username": str(credentials.get("username", ""))[:150]},
        remote_addr=client_address(request),
    )
