"""The reviewer's queue."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.reviews.selectors import reviews_queue


@require_GET
@page_requires("reviews.review_episodes")
def queue(request: HttpRequest) -> HttpResponse:
    """Open reviews assigned to the user, oldest first."""
    return render(request, "reviews/queue.html", {"reviews": reviews_queue(reviewer=request.user)})
