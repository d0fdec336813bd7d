from django.db import migrations, models

from django.db.models import F

# One word per state (webapp.common.jobs): a run or merge that "succeeded" finished; a run a person
# "stopped" was cancelled (at a checkpoint it can still be resumed from).


def forward(apps, schema_editor):
    TrainingRun = apps.get_model("training", "TrainingRun")
    PolicyMerge = apps.get_model("training", "PolicyMerge")
    TrainingRun.objects.filter(status="succeeded").update(status="finished")
    TrainingRun.objects.filter(status="stopped").update(status="cancelled")
    PolicyMerge.objects.filter(status="succeeded").update(status="finished")
    PolicyMerge.objects.filter(status__in=["finished", "failed"], finished_at__isnull=True).update(
        finished_at=F("created_at")
    )
    _fire_pending_checks(schema_editor)


def backward(apps, schema_editor):
    TrainingRun = apps.get_model("training", "TrainingRun")
    PolicyMerge = apps.get_model("training", "PolicyMerge")
    TrainingRun.objects.filter(status="finished").update(status="succeeded")
    TrainingRun.objects.filter(status="cancelled").update(status="stopped")
    PolicyMerge.objects.filter(status="finished").update(status="succeeded")
    _fire_pending_checks(schema_editor)


def _fire_pending_checks(schema_editor):
    # PostgreSQL refuses to ALTER a table with deferred foreign-key checks still queued by the UPDATEs
    # above ("pending trigger events"): run them now, then defer again for the rest of the migration.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


class Migration(migrations.Migration):
    dependencies = [
        ("training", "0005_policyversion_moves_to_policies"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="trainingrun",
            name="trainingrun_ended_has_finished_at",
        ),
        migrations.AddField(
            model_name="policymerge",
            name="attempt",
            field=models.PositiveSmallIntegerField(default=0, help_text="Claims so far (1 on the first run)"),
        ),
        migrations.RenameField(model_name="policymerge", old_name="error_message", new_name="error"),
        migrations.AlterField(
            model_name="policymerge",
            name="error",
            field=models.TextField(blank=True, help_text="Why it failed or was cancelled"),
        ),
        migrations.AddField(
            model_name="policymerge",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, help_text="Last sign of life of its worker", null=True),
        ),
        migrations.AddField(
            model_name="policymerge",
            name="worker",
            field=models.CharField(blank=True, help_text="The worker running it", max_length=200),
        ),
        migrations.RenameField(model_name="trainingrun", old_name="attempts", new_name="attempt"),
        migrations.AlterField(
            model_name="trainingrun",
            name="attempt",
            field=models.PositiveSmallIntegerField(default=0, help_text="Claims so far (1 on the first run)"),
        ),
        migrations.RenameField(model_name="trainingrun", old_name="error_message", new_name="error"),
        migrations.AlterField(
            model_name="trainingrun",
            name="error",
            field=models.TextField(blank=True, help_text="Why it failed or was cancelled"),
        ),
        migrations.AlterField(
            model_name="policymerge",
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
            model_name="trainingrun",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, help_text="Last sign of life of its worker", null=True),
        ),
        migrations.AlterField(
            model_name="trainingrun",
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
            model_name="trainingrun",
            name="worker",
            field=models.CharField(blank=True, help_text="The worker running it", max_length=200),
        ),
        migrations.RunPython(forward, backward),
        migrations.AddConstraint(
            model_name="policymerge",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status__in", ["finished", "failed", "cancelled"]), _negated=True),
                    ("finished_at__isnull", False),
                    _connector="OR",
                ),
                name="policymerge_ended_has_finished_at",
            ),
        ),
        migrations.AddConstraint(
            model_name="trainingrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status__in", ["finished", "failed", "cancelled"]), _negated=True),
                    ("finished_at__isnull", False),
                    _connector="OR",
                ),
                name="trainingrun_ended_has_finished_at",
            ),
        ),
    ]
