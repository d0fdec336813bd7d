from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "webapp.training"
    label = "training"

    def ready(self) -> None:
        # A training worker reports its devices when it starts (the launch form plans against them).
        from webapp.training import workers

        workers.connect()
