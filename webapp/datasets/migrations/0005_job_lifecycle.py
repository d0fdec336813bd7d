from django.db import migrations, models

from django.db.models import F
from django.db.models.functions import Coalesce

# One word per state (webapp.common.jobs): an export "done" and a round "closed" are finished; a
# round "closing" is running.


def forward(apps, schema_editor):
    DatasetExport = apps.get_model("datasets", "DatasetExport")
    FlywheelIteration = apps.get_model("datasets", "FlywheelIteration")
    DatasetExport.objects.filter(status="done").update(status="finished")
    FlywheelIteration.objects.filter(status="closed").update(status="finished")
    FlywheelIteration.objects.filter(status="closing").update(status="running")
    # The new constraint: an ended row says when it ended (its last sign of life, or its start).
    ended = {"status__in": ["finished", "failed", "cancelled"], "finished_at__isnull": True}
    DatasetExport.objects.filter(**ended).update(
        finished_at=Coalesce(F("heartbeat_at"), F("started_at"), F("created_at"))
    )
    FlywheelIteration.objects.filter(**ended).update(finished_at=Coalesce(F("heartbeat_at"), F("started_at")))
    _fire_pending_checks(schema_editor)


def backward(apps, schema_editor):
    DatasetExport = apps.get_model("datasets", "DatasetExport")
    FlywheelIteration = apps.get_model("datasets", "FlywheelIteration")
    DatasetExport.objects.filter(status="finished").update(status="done")
    FlywheelIteration.objects.filter(status="finished").update(status="closed")
    FlywheelIteration.objects.filter(status="running").update(status="closing")
    _fire_pending_checks(schema_editor)


def _fire_pending_checks(schema_editor):
    # PostgreSQL refuses to ALTER a table with deferred foreign-key checks still queued by the UPDATEs
    # above ("pending trigger events"): run them now, then defer again for the rest of the migration.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


class Migration(migrations.Migration):
    dependencies = [
        ("datasets", "0004_policyversion_moves_to_policies"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="flywheeliteration",
            name="flywheel_one_round_closing",
        ),
        migrations.AddField(
            model_name="datasetexport",
            name="attempt",
            field=models.PositiveSmallIntegerField(default=0, help_text="Claims so far (1 on the first run)"),
        ),
        migrations.AddField(
            model_name="flywheeliteration",
            name="attempt",
            field=models.PositiveSmallIntegerField(default=0, help_text="Claims so far (1 on the first run)"),
        ),
        migrations.AddField(
            model_name="flywheeliteration",
            name="error",
            field=models.TextField(blank=True, help_text="Why it failed or was cancelled"),
        ),
        migrations.AddField(
            model_name="flywheeliteration",
            name="worker",
            field=models.CharField(blank=True, help_text="The worker running it", max_length=200),
        ),
        migrations.AlterField(
            model_name="datasetexport",
            name="error",
            field=models.TextField(blank=True, help_text="Why it failed or was cancelled"),
        ),
        migrations.AlterField(
            model_name="datasetexport",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, help_text="Last sign of life of its worker", null=True),
        ),
        migrations.AlterField(
            model_name="datasetexport",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("finished", "Finished"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="pending",
                max_length=10,
            ),
        ),
        migrations.AlterField(
            model_name="datasetexport",
            name="worker",
            field=models.CharField(blank=True, help_text="The worker running it", max_length=200),
        ),
        migrations.AlterField(
            model_name="flywheeliteration",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, help_text="Last sign of life of its worker", null=True),
        ),
        migrations.AlterField(
            model_name="flywheeliteration",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="flywheeliteration",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("running", "Running"),
                    ("finished", "Finished"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="pending",
                max_length=10,
            ),
        ),
        migrations.RunPython(forward, backward),
        migrations.AddConstraint(
            model_name="datasetexport",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status__in", ["finished", "failed", "cancelled"]), _negated=True),
                    ("finished_at__isnull", False),
                    _connector="OR",
                ),
                name="export_ended_has_finished_at",
            ),
        ),
        migrations.AddConstraint(
            model_name="flywheeliteration",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "running")),
                fields=("status",),
                name="flywheel_one_round_running",
            ),
        ),
        migrations.AddConstraint(
            model_name="flywheeliteration",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status__in", ["finished", "failed", "cancelled"]), _negated=True),
                    ("finished_at__isnull", False),
                    _connector="OR",
                ),
                name="flywheel_ended_has_finished_at",
            ),
        ),
    ]
