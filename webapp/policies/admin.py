from django.contrib import admin

from webapp.policies.models import PolicyServer, PolicyVersion


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "model_name", "is_active", "created_at"]
    list_filter = ["backend", "is_active"]


@admin.register(PolicyServer)
class PolicyServerAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "base_model", "engine", "api_url", "last_heartbeat_at"]
    list_filter = ["status"]
