from django.apps import AppConfig


class SandboxesConfig(AppConfig):
    name = "webapp.sandboxes"
    label = "sandboxes"

    def ready(self) -> None:
        # The profiles a task may name: the catalog asks, the hosts (this app) know.
        from webapp.catalog.models import profiles_source_add
        from webapp.sandboxes.selectors import profiles_known

        profiles_source_add(profiles_known)
