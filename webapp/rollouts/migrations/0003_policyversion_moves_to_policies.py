"""PolicyVersion moved to the policies app: the foreign key points there in the model state only (the
table and its constraint are unchanged: no SQL)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0001_initial"),
        ("rollouts", "0002_batch_seeds"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="rolloutbatch",
                    name="policy_version",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="rollout_batches",
                        to="policies.policyversion",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
