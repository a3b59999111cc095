from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from controlplane.accounts.views import LoginView
from controlplane.alerts import views as alert_views
from controlplane.api import api
from controlplane.common.views import api_not_found
from controlplane.web import manage_views, usage_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/new/", views.run_new, name="run-new"),
    path("runs/compare/", views.runs_compare, name="runs-compare"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/usage/", usage_views.run_usage_card, name="run-usage"),
    path("usage/", usage_views.team_usage_page, name="team-usage"),
    path("domains/", views.domains_page, name="domains"),
    path("domains/<slug:slug>/", views.domain_detail, name="domain-detail"),
    path("queue/", views.queue_page, name="queue"),
    path("manage/", manage_views.manage_page, name="manage"),
    path("manage/teams/<slug:slug>/quota/", manage_views.quota_save, name="manage-quota"),
    path("manage/teams/<slug:slug>/members/", manage_views.member_save, name="manage-member"),
    path("manage/pools/", manage_views.pool_save, name="manage-pool"),
    path("manage/base-models/", manage_views.base_model_save, name="manage-base"),
    path("manage/base-models/<slug:name>/remove/", manage_views.base_model_delete, name="manage-base-remove"),
    path("team/", views.switch_team, name="switch-team"),
    path("healthz", views.health, name="health"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("sw.js", views.service_worker, name="service-worker"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("registry/", include("controlplane.registry.urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("api/<path:rest>", api_not_found),
    path("review/", include("controlplane.review.urls")),
    path("alerts/", include("controlplane.alerts.urls")),
    path("notifications/", alert_views.notifications_page, name="notifications"),
]
