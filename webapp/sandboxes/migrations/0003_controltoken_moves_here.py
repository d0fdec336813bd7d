"""ControlToken (who drives a sandbox) moves from the annotation app to sandboxes: the table keeps its
name (annotation_controltoken) and its rows; only Django's model state moves (no SQL), and the content type."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _content_type_to(label):
    """Point the content type of ControlToken (and so any permission on it) at app `label`."""

    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        other = "annotation" if label == "sandboxes" else "sandboxes"
        if not ContentType.objects.filter(app_label=label, model="controltoken").exists():
            ContentType.objects.filter(app_label=other, model="controltoken").update(app_label=label)

    return move


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("episodes", "0006_policyversion_moves_to_policies"),
        ("sandboxes", "0002_host_reports"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ControlToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "holder",
                            models.CharField(
                                blank=True,
                                choices=[("", "Nobody"), ("agent", "Agent"), ("human", "Human")],
                                default="",
                                max_length=8,
                            ),
                        ),
                        ("requested_at", models.DateTimeField(blank=True, null=True)),
                        ("since", models.DateTimeField(auto_now=True)),
                        (
                            "episode",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="episodes.episode",
                            ),
                        ),
                        (
                            "requested_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "sandbox",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="control",
                                to="sandboxes.sandbox",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "annotation_controltoken",
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("holder", "human"), _negated=True),
                                    ("user__isnull", False),
                                    _connector="OR",
                                ),
                                name="control_human_has_user",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(_content_type_to("sandboxes"), _content_type_to("annotation")),
    ]
