from django.urls import path

from webapp.reviews import views

app_name = "reviews"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("<int:pk>/", views.review_page, name="review"),
    path("<int:pk>/label/", views.label_step, name="label"),
    path("<int:pk>/first-error/", views.first_error, name="first_error"),
    path("<int:pk>/correct/", views.correct_step, name="correct"),
    path("<int:pk>/decide/", views.decide, name="decide"),
    path("<int:pk>/resubmit/", views.resubmit, name="resubmit"),
    path("sent-back/", views.sent_back, name="sent_back"),
    path("assign/", views.assign_page, name="assign"),
    path("assign/one/", views.assign_one, name="assign_one"),
    path("assign/auto/", views.assign_auto, name="assign_auto"),
    path("agreement/", views.agreement, name="agreement"),
]
