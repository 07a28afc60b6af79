"""Write dpportal/datasets/data/public_lists.json: the schema page's one-click category lists.

    python scripts/make_public_lists.py [ISO3166_TAB]

Country names and codes come from the tz database's iso3166.tab (public domain; Debian's tzdata
installs it at /usr/share/zoneinfo/iso3166.tab); the other lists are written out below. The
portal reads only the JSON file this writes, which is kept in the repository.
"""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "dpportal" / "data" / "public_lists.json"
US_STATES = (
    "Alabama,Alaska,Arizona,Arkansas,California,Colorado,Connecticut,Delaware,"
    "District of Columbia,Florida,Georgia,Hawaii,Idaho,Illinois,Indiana,Iowa,Kansas,Kentucky,"
    "Louisiana,Maine,Maryland,Massachusetts,Michigan,Minnesota,Mississippi,Missouri,Montana,"
    "Nebraska,Nevada,New Hampshire,New Jersey,New Mexico,New York,North Carolina,North Dakota,"
    "Ohio,Oklahoma,Oregon,Pennsylvania,Rhode Island,South Carolina,South Dakota,Tennessee,Texas,"
    "Utah,Vermont,Virginia,Washington,West Virginia,Wisconsin,Wyoming"
).split(",")
US_STATE_CODES = (
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ "
    "NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY"
).split()
WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = (
    "January February March April May June July August September October November December"
).split()


def countries(tab: Path) -> list[tuple[str, str]]:
    """(code, name) pairs from iso3166.tab, in code order."""
    rows = []
    for line in tab.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            code, name = line.split("\t")
            rows.append((code, name))
    return rows


def lists(tab: Path) -> list[dict]:
    """Return the lists in the order the schema page offers them."""
    pairs = countries(tab)
    return [
        {
            "id": "countries",
            "label": "Countries (ISO 3166 names)",
            "values": sorted(n for _c, n in pairs),
        },
        {
            "id": "country-codes",
            "label": "Countries (ISO 3166 two-letter codes)",
            "values": [c for c, _n in pairs],
        },
        {"id": "us-states", "label": "US states and DC (names)", "values": US_STATES},
        {
            "id": "us-state-codes",
            "label": "US states and DC (postal codes)",
            "values": US_STATE_CODES,
        },
        {"id": "sexes", "label": "Sex: Female, Male", "values": ["Female", "Male"]},
        {"id": "sex-codes", "label": "Sex: F, M", "values": ["F", "M"]},
        {"id": "yes-no", "label": "Yes, No", "values": ["Yes", "No"]},
        {"id": "weekdays", "label": "Weekdays (Monday to Sunday)", "values": WEEKDAYS},
        {"id": "months", "label": "Months (January to December)", "values": MONTHS},
    ]


def main(argv: list[str]) -> int:
    """Write the JSON file (see the module docstring)."""
    tab = Path(argv[1] if len(argv) > 1 else "/usr/share/zoneinfo/iso3166.tab")
    data = {"source": "countries: tz database iso3166.tab (public domain)", "lists": lists(tab)}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(data['lists'])} lists written to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
