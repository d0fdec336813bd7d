"""ControlToken moved to the sandboxes app: removed from this app's model state only (no SQL)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sandboxes", "0003_controltoken_moves_here"),
        ("annotation", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name="ControlToken",
                ),
            ],
            database_operations=[],
        ),
    ]
