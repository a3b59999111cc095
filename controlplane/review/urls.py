from django.urls import path

from controlplane.review import views

urlpatterns = [
    path("", views.index, name="review"),
    path("queues/<int:queue_id>/", views.queue_page, name="review-queue"),
    path("judges/<slug:slug>/", views.judge_page, name="review-judge"),
]
