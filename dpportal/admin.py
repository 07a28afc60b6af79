"""Admin: read-mostly views. The audit log and the ledger cannot be edited or deleted here."""

from django.contrib import admin

from dpportal.models import AuditEvent, BudgetLedgerEntry, Dataset, Release


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor_name", "action", "dataset", "release", "remote_addr")
    list_filter = ("action",)


@admin.register(BudgetLedgerEntry)
class BudgetLedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "dataset", "release", "kind", "epsilon", "delta")


@admin.register(Dataset)
class DatasetAdmin(ReadOnlyAdmin):
    list_display = ("name", "owner", "created_at", "epsilon_total", "epsilon_spent", "deleted_at")


@admin.register(Release)
class ReleaseAdmin(ReadOnlyAdmin):
    list_display = ("pk", "dataset", "mechanism", "status", "epsilon", "created_at")
    list_filter = ("status", "mechanism")
