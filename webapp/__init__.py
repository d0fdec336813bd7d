"""The web application: Django project, one app per domain concept."""

from webapp.celery import app as celery_app

__all__ = ["celery_app"]
