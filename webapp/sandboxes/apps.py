from django.apps import AppConfig


class SandboxesConfig(AppConfig):
    name = "webapp.sandboxes"
    label = "sandboxes"
