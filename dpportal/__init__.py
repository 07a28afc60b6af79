"""DP Portal: a Django project that publishes differentially private releases of tables."""

from dpportal.celery import app as celery_app

__all__ = ["celery_app"]
