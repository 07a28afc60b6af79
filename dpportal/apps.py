from django.apps import AppConfig


class DpPortalConfig(AppConfig):
    name = "dpportal"
    verbose_name = "DP Portal"

    def ready(self):
        from . import checks, signals  # noqa: F401  (deploy checks; login/logout audit handlers)
