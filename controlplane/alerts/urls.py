from django.urls import path

from controlplane.alerts import views

urlpatterns = [
    path("", views.alerts_page, name="alerts"),
    path("rules/<int:rule_id>/", views.rule_page, name="alert-rule"),
]
