"""Root URLconf: pages per app, the JSON API under /api/v1/, the Django admin."""

from django.contrib import admin
from django.urls import include, path

from webapp.api import api

urlpatterns = [
    path("", include("webapp.dashboards.urls")),
    path("accounts/", include("webapp.accounts.urls")),
    path("tasks/", include("webapp.catalog.urls")),
    path("episodes/", include("webapp.episodes.urls")),
    path("rollouts/", include("webapp.rollouts.urls")),
    path("annotate/", include("webapp.annotation.urls")),
    path("reviews/", include("webapp.reviews.urls")),
    path("datasets/", include("webapp.datasets.urls")),
    path("training/", include("webapp.training.urls")),
    path("sandboxes/", include("webapp.sandboxes.urls")),
    path("policies/", include("webapp.policies.urls")),
    path("api/v1/", api.urls),
    path("admin/", admin.site.urls),
]

# A refused request says why (and a body over the limit is 413): webapp.common.errors.
handler400 = "webapp.common.errors.bad_request"
