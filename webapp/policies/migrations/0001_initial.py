"""PolicyVersion moves from the training app to its own: the table keeps its name (training_policyversion)
and its rows; only Django's model state moves (no SQL). Admin permissions follow the content type."""

import django.db.models.deletion
from django.db import migrations, models


def _content_type_to(label):
    """Point the content type of PolicyVersion (and so its admin permissions) at app `label`."""

    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        other = "training" if label == "policies" else "policies"
        if not ContentType.objects.filter(app_label=label, model="policyversion").exists():
            ContentType.objects.filter(app_label=other, model="policyversion").update(app_label=label)

    return move


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("training", "0004_policy_merge"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="PolicyVersion",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.SlugField(max_length=100, unique=True)),
                        (
                            "backend",
                            models.CharField(
                                choices=[
                                    ("openai", "OpenAI-compatible endpoint (vLLM)"),
                                    ("local", "Local transformers model"),
                                    ("oracle", "Scripted oracle"),
                                    ("random", "Random baseline"),
                                    ("noop", "Do nothing"),
                                    ("human", "Human"),
                                ],
                                max_length=8,
                            ),
                        ),
                        ("endpoint_url", models.URLField(blank=True, max_length=300)),
                        (
                            "model_name",
                            models.CharField(
                                blank=True,
                                help_text="Served model name (openai); for a local policy without a checkpoint, its model directory (absolute, or relative to the var dir)",
                                max_length=200,
                            ),
                        ),
                        ("config", models.JSONField(blank=True, default=dict)),
                        (
                            "lineage",
                            models.JSONField(
                                blank=True,
                                default=dict,
                                help_text="Where it came from: training run, step, base policy",
                            ),
                        ),
                        ("is_active", models.BooleanField(default=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "checkpoint",
                            models.OneToOneField(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="policy_version",
                                to="training.checkpoint",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "training_policyversion",
                        "ordering": ["-created_at"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("backend", "openai"), _negated=True),
                                    models.Q(("endpoint_url", ""), _negated=True),
                                    _connector="OR",
                                ),
                                name="policy_openai_has_endpoint",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("backend", "local"), _negated=True),
                                    ("checkpoint__isnull", False),
                                    models.Q(("model_name", ""), _negated=True),
                                    _connector="OR",
                                ),
                                name="policy_local_has_checkpoint",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(_content_type_to("policies"), _content_type_to("training")),
    ]
