"""`{% load raw_facts %}{% raw_facts_of dataset as facts %}`: the dataset's raw-file facts
(row_count, size_bytes, sha256, original_filename) that the signed-in user may see, by name;
the rule is `dpportal.access.facts_visible_to`. `{% relation_note dataset %}` and
`{% hidden_rows_note dataset %}` say in words what the relation protects and why the number of
rows is not shown, with a person column as well as without."""

from django import template

from dpportal.access import has_person_column, raw_facts

register = template.Library()


@register.simple_tag(takes_context=True)
def raw_facts_of(context, dataset) -> dict:
    return raw_facts(context.request.user, dataset)


@register.simple_tag
def relation_note(dataset) -> str:
    """What the dataset's neighbouring relation protects, in one sentence."""
    if has_person_column(dataset):
        if dataset.neighbouring == "replace-one":
            return (
                "With a person column, “replace one” means one person: everything about any one "
                "person (all their rows) is protected, and the number of rows is protected too, "
                "since replacing a person can change it."
            )
        return (
            "With a person column, “add or remove” means one person: even whether someone is "
            "in the table is protected, including the number of rows."
        )
    if dataset.neighbouring == "replace-one":
        return (
            "“Replace one row”: what any one person's row contains is protected; the number of "
            "rows may be published."
        )
    return (
        "“Add or remove one row”: even whether someone is in the table is protected, including "
        "the number of rows."
    )


@register.simple_tag
def hidden_rows_note(dataset) -> str:
    """Why the number of rows is not shown to this reader."""
    if has_person_column(dataset):
        return (
            "Not shown: with a person column (one person, several rows) the number of rows is "
            "protected, since replacing or removing one person changes it"
        )
    if dataset.neighbouring == "replace-one":
        return "Not shown: only the owner and the dataset's auditors see it"
    return "Not shown: under “add or remove one row” the number of rows is protected"
