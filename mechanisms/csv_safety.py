"""CSV cells made safe to open in a spreadsheet (formula injection).

For every CSV published: release packages (mechanisms.package, for the CLI and the portal)
and the portal's audit and release-list exports (dpportal/audit/views.py).

A spreadsheet runs a cell as a formula when it starts with = + - @ (tab, CR and NUL are
stripped or treated alike by some), and some normalise compatibility forms first (NFKC): the
fullwidth ＝ ＋ － ＠, the small ﹦ ﹢ ﹣ ﹫, super- and subscript ⁼ ⁺ ₌ ₊ count as triggers too.
The file is comma-separated and quoted per RFC 4180, but a spreadsheet set to another
separator (semicolon in many locales, tab, vertical bar) splits a cell such as
`x;=HYPERLINK(...)` into two, the second starting with `=`, and quoting does not stop that
when the cell is not first on its line. So a ' is put before every trigger that
starts the cell or follows (after optional double quotes) a character some spreadsheet may
split on: , ; tab | CR LF. Pure numbers (-3.5, +7, 1e-05) are left as they are.
"""

import csv
import io
import re
import unicodedata

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "\0")
SPLITTERS = frozenset(",;\t|\r\n")
_TRIGGER_CHARS = frozenset(FORMULA_TRIGGERS)
PURE_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def escape_cell(value: str) -> str:
    """Put ' before each formula trigger that a spreadsheet could see at the start of a cell."""
    starts = [0, *(i + 1 for i, ch in enumerate(value) if ch in SPLITTERS)]
    pieces, done = [], 0
    for start in starts:
        at = start
        while at < len(value) and value[at] == '"':
            at += 1
        if at < len(value) and is_trigger(value[at]):
            if PURE_NUMBER.fullmatch(_segment(value, at)):
                continue
            pieces += [value[done:at], "'"]
            done = at
    return "".join(pieces) + value[done:]


def is_trigger(char: str) -> bool:
    """Tell whether a spreadsheet may read `char` as the start of a formula.

    Also after turning a compatibility form (fullwidth, small, super- or subscript) into its
    plain character, as some spreadsheets do.
    """
    if char in _TRIGGER_CHARS:
        return True
    return not char.isascii() and unicodedata.normalize("NFKC", char)[:1] in _TRIGGER_CHARS


def _segment(value: str, at: int) -> str:
    """The text from `at` to the next character a spreadsheet may split on."""
    end = next((i for i in range(at + 1, len(value)) if value[i] in SPLITTERS), len(value))
    return value[at:end]


def safe_csv(content: bytes) -> bytes:
    """Rewrite CSV bytes with every cell escaped and quoted per RFC 4180 (CRLF line ends)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    for row in csv.reader(io.StringIO(content.decode("utf-8"), newline="")):
        writer.writerow([escape_cell(cell) for cell in row])
    return out.getvalue().encode("utf-8")
