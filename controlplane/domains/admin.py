from django.contrib import admin

from controlplane.accounts.principal import Principal
from controlplane.common.admin import ReadOnlyAdmin
from controlplane.domains.models import Domain, DomainVersion, VerifierAudit, VerifierAuditOverride
from controlplane.domains.services import domain_create, domain_update


@admin.register(Domain)
class DomainAdmin(admin.ModelAdmin):
    list_display = ("slug", "title", "kind", "family", "version", "priority", "max_concurrent_sandboxes", "max_share", "is_active")
    list_filter = ("kind", "family", "is_active")
    search_fields = ("slug", "title", "description")
    readonly_fields = ("version", "created_at", "updated_at")

    def save_model(self, request, obj, form, change):
        # Edits go through the service so they are validated, versioned and audited.
        actor = Principal.for_user(request.user)
        data = {f: form.cleaned_data[f] for f in form.changed_data if f not in ("version",)}
        if change:
            domain_update(actor=actor, domain=Domain.objects.get(pk=obj.pk), changes=data, note="edited in admin")
        else:
            created = domain_create(actor=actor, data={f: form.cleaned_data[f] for f in form.cleaned_data
                                                       if f not in ("team", "version")}, team=form.cleaned_data.get("team"))
            obj.pk = created.pk


@admin.register(DomainVersion)
class DomainVersionAdmin(ReadOnlyAdmin):
    list_display = ("domain", "version", "note", "created_by", "created_at")
    list_filter = ("domain__kind",)
    search_fields = ("domain__slug",)


@admin.register(VerifierAudit)
class VerifierAuditAdmin(ReadOnlyAdmin):
    """Written by the audit task; re-runs and overrides go through the API (audited)."""

    list_display = ("domain_version", "status", "probes", "false_positives", "false_negatives_gold", "auditor_version",
                    "created_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("domain_version__domain__slug",)


@admin.register(VerifierAuditOverride)
class VerifierAuditOverrideAdmin(ReadOnlyAdmin):
    list_display = ("audit", "admin_name", "reason", "created_at")
    search_fields = ("audit__domain_version__domain__slug", "admin_name")
