from django.db import migrations, models


def seeds_of_earlier_batches(apps, schema_editor):
    # Before seeds could be chosen, a batch ran seeds 0 … episodes_per_task - 1.
    RolloutBatch = apps.get_model("rollouts", "RolloutBatch")
    for batch in RolloutBatch.objects.only("pk", "episodes_per_task"):
        RolloutBatch.objects.filter(pk=batch.pk).update(seeds=list(range(batch.episodes_per_task)))


class Migration(migrations.Migration):
    dependencies = [
        ("rollouts", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="rolloutbatch",
            name="seeds",
            field=models.JSONField(
                blank=True, default=list, help_text="The seeds each task runs with, one episode per seed"
            ),
        ),
        migrations.RunPython(seeds_of_earlier_batches, migrations.RunPython.noop),
    ]
