"""Record logins, failed logins and logouts in the audit log."""

import ipaddress

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.dispatch import receiver

from dpportal.access.login_limit import client_address as proxy_aware_address
from dpportal.models import AuditEvent
from dpportal.services import audit_record


def client_address(request):
    """The "from where" of every audit event: the login limit's client address (behind the TLS
    proxy, the address the proxy appended), or None when unknown or not an IP address."""
    address = proxy_aware_address(request) if request is not None else ""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


@receiver(user_logged_in)
def audit_login(sender, request, user, **kwargs):
    audit_record(action=AuditEvent.Action.LOGIN, actor=user, remote_addr=client_address(request))


@receiver(user_logged_out)
def audit_logout(sender, request, user, **kwargs):
    if user is not None:
        audit_record(
            action=AuditEvent.Action.LOGOUT, actor=user, remote_addr=client_address(request)
        )


@receiver(user_login_failed)
def audit_login_failed(sender, credentials, request=None, **kwargs):
    audit_record(
        action=AuditEvent.Action.LOGIN_FAILED,
        details={"username": str(credentials.get("username", ""))[:150]},
        remote_addr=client_address(request),
    )
