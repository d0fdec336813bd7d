from django.contrib import admin

from webapp.sandboxes.models import Lease, Sandbox, SandboxHost


@admin.register(SandboxHost)
class SandboxHostAdmin(admin.ModelAdmin):
    list_display = ["name", "api_url", "status", "last_heartbeat_at", "version"]
    list_filter = ["status"]


@admin.register(Sandbox)
class SandboxAdmin(admin.ModelAdmin):
    list_display = ["external_id", "host", "provider", "profile", "state", "updated_at"]
    list_filter = ["provider", "profile", "state", "host"]
    search_fields = ["external_id"]


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ["pk", "sandbox", "holder", "state", "acquired_at", "expires_at"]
    list_filter = ["state"]
    search_fields = ["holder"]
