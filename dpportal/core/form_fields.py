"""Form fields and validators for text and numbers that people type: one place for the rules.

- Numbers must be typed with the digits 0-9: Python's Decimal also reads other scripts' digits
  ("١" is 1), which would let a value on the page differ from what the reader sees.
- Names and descriptions are normalised (NFKC, as Django normalises user names) and refused if
  they hold invisible or direction-changing characters (zero-width spaces, right-to-left
  overrides: Unicode categories Cc and Cf) or mix letters of look-alike scripts (Latin with
  Cyrillic or Greek), which let one name pass for another in lists and the audit log.
"""

import unicodedata

from django import forms
from django.core.exceptions import ValidationError

# Text boxes with a numeric keyboard rather than type=number: Chromium scrolls the page when a
# number box loses focus, which can move the submit button away from under the pointer.
DECIMAL_INPUT = forms.TextInput(attrs={"inputmode": "decimal"})
WHOLE_NUMBER_INPUT = forms.TextInput(attrs={"inputmode": "numeric"})

LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")
ALLOWED_CONTROLS = frozenset("\n\r\t")


class PlainDecimalField(forms.DecimalField):
    """A DecimalField that accepts only the digits 0-9 (with sign, point and exponent)."""

    def to_python(self, value):  # Decimal | None (the stubs type DecimalField as IntegerField's)
        if isinstance(value, str) and not value.strip().isascii():
            raise ValidationError(
                "Type the number with the digits 0-9 (for example 0.5).", code="digits"
            )
        return super().to_python(value)


def clean_display_text(value: str, *, multiline: bool = False) -> str:
    """The text in NFKC form, or a ValidationError saying which character is not allowed."""
    text = unicodedata.normalize("NFKC", value)
    for position, char in enumerate(text, start=1):
        category = unicodedata.category(char)
        if category in ("Cc", "Cf") and not (multiline and char in ALLOWED_CONTROLS):
            raise ValidationError(
                f"Character {position} is an invisible or direction-changing character "
                f"(U+{ord(char):04X}); delete it and type the text again.",
                code="invisible",
            )
    scripts = {_script(char) for char in text if char.isalpha()} & set(LOOKALIKE_SCRIPTS)
    if len(scripts) > 1:
        raise ValidationError(
            f"The text mixes {' and '.join(sorted(s.title() for s in scripts))} letters, which "
            "look alike; type it in one alphabet.",
            code="mixed-scripts",
        )
    return text


def _script(char: str) -> str:
    return unicodedata.name(char, "").split(" ", 1)[0]


class DisplayTextField(forms.CharField):
    """A CharField for names shown to other people: normalised, no invisible characters."""

    def __init__(self, *, multiline: bool = False, **kwargs):
        self.multiline = multiline
        super().__init__(**kwargs)

    def clean(self, value):
        value = super().clean(value)
        return clean_display_text(value, multiline=self.multiline) if value else value


def choice_field(form: forms.BaseForm, name: str) -> forms.ChoiceField:
    """The form's field `name`, a ChoiceField whose choices the form sets when it is made (from
    the user's datasets, a schema's columns)."""
    field = form.fields[name]
    if not isinstance(field, forms.ChoiceField):
        raise TypeError(f"the field {name!r} is a {type(field).__name__}, not a ChoiceField")
    return field
