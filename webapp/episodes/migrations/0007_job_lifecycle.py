from django.db import migrations, models


# One word per state (webapp.common.jobs): "aborted" was two states. An episode its annotator
# abandoned was cancelled; any other (an infrastructure failure, a demonstration that lost its
# sandbox) failed.


def forward(apps, schema_editor):
    Episode = apps.get_model("episodes", "Episode")
    aborted = Episode.objects.filter(status="aborted")
    aborted.filter(env_error=False, error__startswith="abandoned").update(status="cancelled")
    aborted.update(status="failed")
    _fire_pending_checks(schema_editor)


def backward(apps, schema_editor):
    Episode = apps.get_model("episodes", "Episode")
    Episode.objects.filter(status__in=["failed", "cancelled"]).update(status="aborted")
    _fire_pending_checks(schema_editor)


def _fire_pending_checks(schema_editor):
    # PostgreSQL refuses to ALTER a table with deferred foreign-key checks still queued by the UPDATEs
    # above ("pending trigger events"): run them now, then defer again for the rest of the migration.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0006_policyversion_moves_to_policies"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="episode",
            name="episode_ended_has_finished_at",
        ),
        migrations.RenameField(model_name="episode", old_name="error_message", new_name="error"),
        migrations.AlterField(
            model_name="episode",
            name="error",
            field=models.TextField(blank=True, help_text="Why it failed or was cancelled"),
        ),
        migrations.AlterField(
            model_name="episode",
            name="attempt",
            field=models.PositiveSmallIntegerField(
                default=1, help_text="1, or which re-run of an env_error it is"
            ),
        ),
        migrations.AlterField(
            model_name="episode",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, help_text="Last sign of life of its worker", null=True),
        ),
        migrations.AlterField(
            model_name="episode",
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
            model_name="episode",
            name="worker",
            field=models.CharField(blank=True, help_text="The worker running it", max_length=200),
        ),
        migrations.RunPython(forward, backward),
        migrations.AddConstraint(
            model_name="episode",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status__in", ["finished", "failed", "cancelled"]), _negated=True),
                    ("finished_at__isnull", False),
                    _connector="OR",
                ),
                name="episode_ended_has_finished_at",
            ),
        ),
    ]
