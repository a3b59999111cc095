"""Template filters for usage figures."""
from __future__ import annotations

from django import template

from controlplane.common.words import duration

register = template.Library()
register.filter("duration", duration)
