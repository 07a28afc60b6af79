"""The package's report.html and README.txt state the risk in words (issue 46 item 2).

The numbers expected are computed from the formula in tests.mechanisms.test_risk (60-digit
decimals, independent of mechanisms.risk), for the release's epsilon and the dataset's spent total.
"""

import html
import re

from mechanisms.package import Budget, PackageContext, build_package
from tests.mechanisms.test_package import MANIFEST, NOISY_COUNTS
from tests.mechanisms.test_risk import expected_percent, expected_posterior

CONTEXT = PackageContext(title="Release 7", dataset="Survey 2026", budget=Budget("1.25", "3"))


def words(text: str) -> str:
    """The text as read: tags dropped, entities decoded, all whitespace one space."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def package_of(manifest: dict, context: PackageContext) -> dict[str, bytes]:
    return build_package({"noisy_counts.csv": NOISY_COUNTS.encode()}, manifest, context)


def sentence(prior: float, epsilon: float, event: str, claim: str) -> str:
    before = expected_percent(expected_posterior(0, prior))
    after = expected_percent(expected_posterior(epsilon, prior))
    return f"Someone who was {before} sure, before {event}, that {claim} is at most {after} sure"


def test_report_and_readme_state_the_release_and_dataset_risk():
    package = package_of(MANIFEST, CONTEXT)  # epsilon 0.75, add-remove, one row; 1.25 spent
    for name in ("report.html", "README.txt"):
        text = words(package[name].decode())
        for prior in (0.01, 0.1, 0.5):
            assert sentence(prior, 0.75, "this release", "a given row is in the table") in text
            everything = "all releases of this dataset together"
            assert sentence(prior, 1.25, everything, "a given row is in the table") in text
        assert "These bounds always hold (delta = 0)" in text
    assert "at most 2.1% sure" in words(package["README.txt"].decode())  # e^.75/(99+e^.75)


def test_a_person_level_replace_one_release_speaks_of_a_property_and_of_delta():
    manifest = {
        **MANIFEST,
        "guarantee": {
            **MANIFEST["guarantee"],
            "neighbouring": "replace-one",
            "epsilon": 2.0,
            "delta": 1e-6,
            "max_rows_per_person": 3,
        },
    }
    context = PackageContext(budget=Budget("3", "5", "0.000002", "0.00001", releases=2))
    package = package_of(manifest, context)
    claim = "a given person's rows have some property (a value in one of their columns)"
    for name in ("report.html", "README.txt"):
        text = words(package[name].decode())
        assert sentence(0.1, 2.0, "this release", claim) in text
        assert sentence(0.5, 3.0, "all releases of this dataset together", claim) in text
        assert "With a probability of at most delta = 0.000001 these bounds may not hold" in text
        assert "With a probability of at most delta = 0.000002 these bounds may not hold" in text
        assert "number of people is public" in text


def test_a_manifest_without_a_relation_still_builds_without_risk_sentences():
    manifest = {**MANIFEST, "guarantee": {"epsilon": 1.0}}
    package = package_of(manifest, PackageContext())
    assert "Someone who was" not in words(package["README.txt"].decode())
