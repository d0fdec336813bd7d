from django.contrib import admin

from webapp.catalog.models import Task, TaskSuite


@admin.register(TaskSuite)
class TaskSuiteAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["slug", "title", "platform", "env_profile", "is_published", "attempts", "successes"]
    list_filter = ["platform", "is_published", "suites"]
    search_fields = ["slug", "title", "instruction"]
    filter_horizontal = ["suites"]
    readonly_fields = ["attempts", "successes", "created_at", "updated_at"]
