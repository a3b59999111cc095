from django.urls import path

from controlplane.registry import views

urlpatterns = [
    path("", views.versions_page, name="registry"),
    path("compare/", views.compare_page, name="registry-compare"),
    path("aliases/move/", views.alias_move_view, name="registry-alias-move"),
    path("aliases/rollback/", views.alias_rollback_view, name="registry-alias-rollback"),
]
