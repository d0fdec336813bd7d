from django.contrib import admin

from webapp.policies.models import PolicyVersion


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "model_name", "is_active", "created_at"]
    list_filter = ["backend", "is_active"]
