from django.urls import path

from controlplane.registry import views

urlpatterns = [
    path("", views.versions_page, name="registry"),
    path("compare/", views.compare_page, name="registry-compare"),
]
