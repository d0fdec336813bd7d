from django.contrib import admin

from webapp.datasets.models import Dataset, DatasetVersion, FlywheelIteration


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "created_at"]
    list_filter = ["kind"]


@admin.register(DatasetVersion)
class DatasetVersionAdmin(admin.ModelAdmin):
    list_display = ["dataset", "number", "num_episodes", "num_steps", "sealed_at"]
    list_filter = ["dataset"]

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return obj is None or not obj.is_sealed  # sealed versions are read-only

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return obj is None or not obj.is_sealed


@admin.register(FlywheelIteration)
class FlywheelIterationAdmin(admin.ModelAdmin):
    list_display = ["number", "policy_version", "status", "started_at", "finished_at"]
