from django.contrib import admin

from webapp.episodes.models import Episode, Step


class StepInline(admin.TabularInline):
    model = Step
    fields = ["index", "actor", "action_text", "thought", "screenshot"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    list_display = ["pk", "task", "source", "status", "reward", "env_error", "num_steps", "created_at"]
    list_filter = ["source", "status", "env_error"]
    search_fields = ["task__slug"]
    raw_id_fields = ["task", "sandbox", "annotator", "policy_version"]
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ["episode", "index", "actor", "action_text", "observed_at"]
    list_filter = ["actor"]
    raw_id_fields = ["episode"]
