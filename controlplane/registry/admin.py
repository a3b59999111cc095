from django.contrib import admin

from controlplane.common.admin import ReadOnlyAdmin
from controlplane.registry.models import Alias, AliasMove, BaseModel, EvalResult, EvalRun, EvalSuite, EvalSuiteVersion, ModelVersion


@admin.register(ModelVersion)
class ModelVersionAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "team", "run", "step", "created_at")
    list_filter = ("team", "base")
    search_fields = ("name",)


@admin.register(Alias)
class AliasAdmin(ReadOnlyAdmin):
    """Aliases move through the API or CLI only, so every move passes the gate and is audited."""

    list_display = ("team", "base", "name", "version", "updated_at")


@admin.register(AliasMove)
class AliasMoveAdmin(ReadOnlyAdmin):
    list_display = ("at", "alias", "kind", "from_version", "to_version", "actor", "reason")


@admin.register(EvalSuite)
class EvalSuiteAdmin(ReadOnlyAdmin):
    list_display = ("slug", "team", "version", "title")


@admin.register(EvalSuiteVersion)
class EvalSuiteVersionAdmin(ReadOnlyAdmin):
    list_display = ("suite", "version", "created_by", "created_at")


class EvalResultInline(admin.TabularInline):
    model = EvalResult
    extra = 0
    can_delete = False
    fields = ("layer", "domain", "domain_version", "tasks", "pass_at", "mean_reward", "tokens_per_task", "seconds_per_task")
    readonly_fields = fields


@admin.register(EvalRun)
class EvalRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "version", "suite_version", "engine", "state", "created_at", "finished_at")
    list_filter = ("state",)
    inlines = [EvalResultInline]


@admin.register(BaseModel)
class BaseModelAdmin(ReadOnlyAdmin):
    """Registered through the API or ``temper base-models``, so every path is checked and audited."""

    list_display = ("name", "path", "description", "created_by", "created_at")
