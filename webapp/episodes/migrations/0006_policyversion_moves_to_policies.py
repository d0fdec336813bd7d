"""PolicyVersion moved to the policies app: the foreign key points there in the model state only (the
table and its constraint are unchanged: no SQL)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0005_episode_final_screen"),
        ("policies", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="episode",
                    name="policy_version",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="episodes",
                        to="policies.policyversion",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
