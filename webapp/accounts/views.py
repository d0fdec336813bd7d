"""Login, logout and API-token pages."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import page_requires
from webapp.accounts.models import ApiToken
from webapp.accounts.selectors import api_tokens_of
from webapp.accounts.services import api_token_create, api_token_revoke
from webapp.accounts.throttle import ThrottledAuthenticationForm


class LoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    redirect_authenticated_user = True
    form_class = ThrottledAuthenticationForm

    def form_invalid(self, form: ThrottledAuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if form.throttled:
            response.status_code = 429
        return response


@require_GET
@page_requires()
def tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens, and a form for a new one."""
    return render(request, "accounts/tokens.html", {"tokens": api_tokens_of(user=request.user)})


@require_POST
@page_requires()
def token_create(request: HttpRequest) -> HttpResponse:
    """Create a token and show its secret once."""
    name = request.POST.get("name", "").strip()
    if not name or len(name) > 100:
        messages.error(request, "Give the token a name of 1 to 100 characters.")
        return redirect("accounts:tokens")
    _, raw = api_token_create(user=request.user, name=name)
    return render(
        request, "accounts/tokens.html", {"tokens": api_tokens_of(user=request.user), "new_token": raw}
    )


@require_POST
@page_requires()
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of the user's own tokens."""
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    api_token_revoke(token=token)
    messages.success(request, f"Revoked {token}.")
    return redirect("accounts:tokens")
