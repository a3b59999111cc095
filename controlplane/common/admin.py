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
