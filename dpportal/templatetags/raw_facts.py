"""`{% load raw_facts %}{% raw_facts_of dataset as facts %}`: the dataset's raw-file facts
(row_count, size_bytes, sha256, original_filename) that the signed-in user may see, by name;
the rule is `dpportal.access.rules.facts_visible_to`. `{% person_level_of dataset as flag %}`:
whether its schema names a person column (the row count is then private under both relations)."""

from django import template

from dpportal.access.rules import has_person_column, raw_facts

register = template.Library()


@register.simple_tag(takes_context=True)
def raw_facts_of(context, dataset) -> dict:
    return raw_facts(context.request.user, dataset)


@register.simple_tag
def person_level_of(dataset) -> bool:
    return has_person_column(dataset)
