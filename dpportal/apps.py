from django.apps import AppConfig


class DpPortalConfig(AppConfig):
    name = "dpportal"
    verbose_name = "DP Portal"

    def ready(self):
        # Imported here, not at the top: they import the models, which Django loads only once
        # every app is registered (this hook). They register deploy checks and audit handlers.
        from dpportal import checks, signals  # noqa: F401
