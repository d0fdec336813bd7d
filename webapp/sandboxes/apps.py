from django.apps import AppConfig


class SandboxesConfig(AppConfig):
    name = "webapp.sandboxes"
    label = "sandboxes"

    def ready(self) -> None:
        # The profiles a task may name: the catalog asks, the hosts (this app) know.
        from webapp.catalog.availability import profiles_served_source_set
        from webapp.catalog.models import profiles_source_add
        from webapp.sandboxes.selectors import profiles_known, profiles_served

        profiles_source_add(profiles_known)
        # And those a task can start on now (an office task is unavailable while no host serves office).
        profiles_served_source_set(profiles_served)
