"""Abstract models the apps share."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class WriteOnceQuerySet(models.QuerySet):
    """Refuses ``update()``: the rows are written once."""

    def update(self, **kwargs):
        raise TypeError(self.model.immutable_error)


class WriteOnce(models.Model):
    """A row that is written once: saving it again, or ``update()`` on its rows, raises
    ``TypeError(immutable_error)``."""

    immutable_error = "rows are immutable"

    objects = WriteOnceQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError(self.immutable_error)
        super().save(*args, **kwargs)


class ImmutableVersion(WriteOnce):
    """One immutable version of an object that is edited by making new versions: its number, a
    note, who made it and when. The subclass adds the object it versions and the content."""

    version = models.IntegerField()
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
