"""Template filters for plain-language labels: {% load portal_labels %}."""

from django import template

from dpportal.release_forms import mechanism_title as _mechanism_title

register = template.Library()


@register.filter
def mechanism_title(name):
    """`{{ release.mechanism|mechanism_title }}` → "Synthetic data (MWEM)"."""
    return _mechanism_title(name)
