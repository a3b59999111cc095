from django.contrib import admin

from controlplane.accounts.models import ApiToken, AuditLog, Membership, Team
from controlplane.common.admin import AuditedAdmin, ReadOnlyAdmin


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ("user", "team", "role")
    list_filter = ("role", "team")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "user", "team", "role", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("role", "team")
    readonly_fields = ("prefix", "digest", "created_at", "last_used_at")

    def has_add_permission(self, request, obj=None):
        return False  # tokens are created through the API or CLI, which show the secret once


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_name", "team", "action", "object_type", "object_id", "object_repr")
    list_filter = ("action", "object_type", "team")
    search_fields = ("object_repr", "actor_name", "object_id")
