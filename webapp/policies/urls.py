from django.urls import path

from webapp.policies import views

app_name = "policies"
urlpatterns = [
    path("servers/", views.servers, name="servers"),
]
