from django.contrib import admin

from webapp.training.models import Checkpoint, MetricPoint, TrainingRun


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "algorithm",
        "status",
        "step",
        "attempt",
        "heartbeat_at",
        "created_by",
        "created_at",
    ]
    list_filter = ["algorithm", "status"]
    readonly_fields = ["heartbeat_at", "worker", "attempt", "step"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["run", "step", "path", "created_at"]


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ["run", "name", "step", "value", "recorded_at"]
    list_filter = ["name"]
