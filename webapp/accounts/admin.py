from django.contrib import admin

from webapp.accounts.models import ApiToken
from webapp.accounts.throttle import ThrottledAdminAuthenticationForm

# The admin's login checks passwords too: the same throttling as the login page.
admin.site.login_form = ThrottledAdminAuthenticationForm


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["prefix", "token_hash", "created_at", "last_used_at"]
