from django.apps import AppConfig


class ReviewsConfig(AppConfig):
    name = "webapp.reviews"
    label = "reviews"
