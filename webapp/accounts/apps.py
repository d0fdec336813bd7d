from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "webapp.accounts"
    label = "accounts"

    def ready(self) -> None:
        # Permissions are created by post_migrate app by app (auth's handler runs first), so the
        # role groups are synced after each app; the last pass sees every permission.
        post_migrate.connect(_sync_roles, dispatch_uid="accounts.sync_roles")


def _sync_roles(sender: AppConfig, using: str = "default", **kwargs: object) -> None:  # noqa: ARG001
    from webapp.accounts.services import roles_sync

    roles_sync(using=using)
