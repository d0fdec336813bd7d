from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "webapp.episodes"
    label = "episodes"
