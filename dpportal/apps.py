from django.apps import AppConfig


class DpPortalConfig(AppConfig):
    name = "dpportal"
    verbose_name = "DP Portal"

    def ready(self):
        from . import signals  # noqa: F401  (connects the login/logout audit handlers)
