"""The home page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.dashboards.selectors import home_cards


@require_GET
@page_requires()
def home(request: HttpRequest) -> HttpResponse:
    """What the person can do next, by role."""
    return render(request, "dashboards/home.html", {"cards": home_cards(user=request.user)})
