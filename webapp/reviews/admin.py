from django.contrib import admin

from webapp.reviews.models import Review, ReviewEvent, StepLabel


class ReviewEventInline(admin.TabularInline):
    model = ReviewEvent
    readonly_fields = ["actor", "from_state", "to_state", "comment", "at"]
    extra = 0
    can_delete = False


@admin.register(Review)
class ReviewAdmin(admin.ModelAdmin):
    list_display = ["pk", "episode", "reviewer", "state", "quality", "decided_at"]
    list_filter = ["state"]
    raw_id_fields = ["episode", "reviewer"]
    # State changes go through review_transition() so the history stays whole.
    readonly_fields = ["state", "decided_at"]
    inlines = [ReviewEventInline]


@admin.register(StepLabel)
class StepLabelAdmin(admin.ModelAdmin):
    list_display = ["review", "step", "label"]
    list_filter = ["label"]
    raw_id_fields = ["review", "step"]
