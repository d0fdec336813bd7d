"""PolicyVersion moved to the policies app: the foreign key points there in the model state only (the
table and its constraint are unchanged: no SQL)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("datasets", "0004_policyversion_moves_to_policies"),
        ("episodes", "0006_policyversion_moves_to_policies"),
        ("policies", "0001_initial"),
        ("rollouts", "0003_policyversion_moves_to_policies"),
        ("training", "0004_policy_merge"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="policymerge",
                    name="policy",
                    field=models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="merge",
                        to="policies.policyversion",
                    ),
                ),
                migrations.AlterField(
                    model_name="trainingrun",
                    name="base_policy",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="training_runs",
                        to="policies.policyversion",
                    ),
                ),
                migrations.DeleteModel(
                    name="PolicyVersion",
                ),
            ],
            database_operations=[],
        ),
    ]
