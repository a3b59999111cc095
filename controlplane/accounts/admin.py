"""Admin pages for teams, memberships, tokens and the audit log; AuditedAdmin audits any app's admin edits."""
from django.contrib import admin

from controlplane.accounts.models import ApiToken, AuditLog, Membership, Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.accounts.views import AdminLoginForm
from controlplane.common.admin import ReadOnlyAdmin

admin.site.login_form = AdminLoginForm  # login throttling's refusal said plainly there too


class AuditedAdmin(admin.ModelAdmin):
    """Edits made in the admin are audited like edits through the API."""

    def save_model(self, request, obj, form, change):
        fields = [f for f in form.changed_data]
        before = {f: _jsonable(form.initial.get(f)) for f in fields} if change else None
        super().save_model(request, obj, form, change)
        after = {f: _jsonable(getattr(obj, f, None)) for f in fields}
        if fields or not change:
            audit_record(actor=Principal.for_user(request.user), obj=obj,
                         action=f"{obj._meta.model_name}.{'admin_change' if change else 'admin_create'}",
                         before=before, after=after, team=getattr(obj, "team", None))

    def delete_model(self, request, obj):
        audit_record(actor=Principal.for_user(request.user), obj=obj, action=f"{obj._meta.model_name}.admin_delete",
                     team=getattr(obj, "team", None))
        super().delete_model(request, obj)


def _jsonable(value):
    if value is None or isinstance(value, (str, int, float, bool, list, dict)):
        return value
    return getattr(value, "pk", None) if hasattr(value, "pk") else str(value)


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
