"""Admin helpers."""
from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows that are never edited by hand (audit log, domain versions)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AuditedAdmin(admin.ModelAdmin):
    """Edits made in the admin are audited like edits through the API."""

    def save_model(self, request, obj, form, change):
        from controlplane.accounts.principal import Principal
        from controlplane.accounts.services import audit_record

        fields = [f for f in form.changed_data]
        before = {f: _jsonable(form.initial.get(f)) for f in fields} if change else None
        super().save_model(request, obj, form, change)
        after = {f: _jsonable(getattr(obj, f, None)) for f in fields}
        if fields or not change:
            audit_record(actor=Principal.for_user(request.user), obj=obj,
                         action=f"{obj._meta.model_name}.{'admin_change' if change else 'admin_create'}",
                         before=before, after=after, team=getattr(obj, "team", None))

    def delete_model(self, request, obj):
        from controlplane.accounts.principal import Principal
        from controlplane.accounts.services import audit_record

        audit_record(actor=Principal.for_user(request.user), obj=obj, action=f"{obj._meta.model_name}.admin_delete",
                     team=getattr(obj, "team", None))
        super().delete_model(request, obj)


def _jsonable(value):
    if value is None or isinstance(value, (str, int, float, bool, list, dict)):
        return value
    return getattr(value, "pk", None) if hasattr(value, "pk") else str(value)
