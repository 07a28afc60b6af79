"""Help text reaches screen readers: on every HTML page (owner and auditor, every form), each
`aria-describedby` names an element that exists on the page. Django 5.2 points a field with help
text at `<auto_id>_helptext` (django/forms/boundfield.py), so a template that renders the help
text itself must give it that id."""

import pytest

from tests.helpers import client_for, dangling_references, html_pages

pytestmark = pytest.mark.django_db


def test_every_aria_describedby_names_an_element_on_the_page(pages_world, a_minute_later):
    world = pages_world
    problems, references, pages = [], 0, 0
    for user in (world.alice, world.carol):
        client = client_for(user)
        for path in html_pages(user, world, releases=[world.range_release]):
            missing, count = dangling_references(client.get(path).content.decode())
            problems += [f"{user.username} {path}: {m}" for m in missing]
            references += count
            pages += 1
    print(f"\nhelp text: {pages} pages, {references} aria-describedby references")
    assert problems == [], "\n".join(problems)
    assert pages >= 20 and references >= 10  # the forms with help text were really reached


def test_the_check_catches_a_help_text_under_another_id():
    html = (
        '<input name="epsilon" aria-describedby="id_epsilon_helptext"><span id="id_epsilon_help">'
    )
    assert dangling_references(html) == (["<input name=epsilon> → #id_epsilon_helptext"], 1)
