"""T7: randomness sanity of what the portal runs (rng=None: the secure, unseeded source).

1,000 releases of the same input, perturbed histogram at noise scale 10 (replace-one,
epsilon = 0.2), 20 cells each:
- duplicates: cells' noise paired disjointly ((0,1), (2,3), ... within a cell), the number of
  equal pairs is Binomial(500 x 20, p) with p = sum_k P(k)^2 for the discrete Laplace of scale
  10; it must lie within the two-sided 1e-6 binomial interval;
- no two of the 1,000 full noise vectors are equal (chance for an honest source ~ 1e-40).
Twins (each must be caught, from 250 releases): a source re-seeded the same every release;
one seeded from only 256 possible seeds; noise coarsened to multiples of 3 (too many
duplicates).
Seeds: the portal code, URL patterns and templates are scanned by
tests/dpportal/test_static_rules.py; here every form class is introspected, a release POST
with extra seed/rng fields stores no such parameter, and seed parameters never steer a
mechanism (refused, or without effect).
"""

from __future__ import annotations

import importlib
import inspect
import io
import math
import secrets

import numpy as np
import pandas as pd
import pytest
from django import forms
from django.test import Client
from scipy.stats import binom

import mechanisms
from dpportal import services
from dpportal.models import Release
from mechanisms.errors import MechanismError
from mechanisms.noise import RandomSource, seeded_source
from tests.helpers import make_dataset, make_user, post_new_release

RELEASES, ALPHA, SCALE = 1_000, 1e-6, 10.0
SCHEMA = mechanisms.Schema.from_dict(
    {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 5},
            {"name": "g", "type": "categorical", "categories": ["a", "b", "c"], "unknown": "other"},
        ]
    }
)
DATA = pd.DataFrame({"x": np.linspace(0, 1, 40), "g": list("abcd") * 10})
TRUE = SCHEMA.cell_counts(DATA, ["x", "g"]).ravel()


def noise_vectors(make_source, releases=RELEASES) -> np.ndarray:
    """(releases, cells) noise of repeated whole releases, read back from noisy_counts.csv."""
    out = np.empty((releases, TRUE.size), dtype=np.int64)
    for i in range(releases):
        release = mechanisms.run_release(
            "perturbed_histogram",
            DATA,
            SCHEMA,
            epsilon=2 / SCALE,
            params={"rows": 0},
            rng=make_source(),
        )
        noisy = pd.read_csv(io.BytesIO(release.files["noisy_counts.csv"]))["noisy_count"]
        out[i] = noisy.to_numpy() - TRUE
    return out


def collision_probability(scale: float) -> float:
    """sum_k P(k)^2 for P(k) = (1 - a) / (1 + a) a^|k|, a = exp(-1 / scale)."""
    a = math.exp(-1 / scale)
    return ((1 - a) / (1 + a)) ** 2 * (1 + a * a) / (1 - a * a)


def sanity(vectors: np.ndarray) -> tuple[bool, str]:
    pairs = vectors[0::2] == vectors[1::2]  # disjoint pairs: independent Bernoulli(p)
    trials, equal = pairs.size, int(pairs.sum())
    low, high = (
        binom.ppf(ALPHA / 2, trials, collision_probability(SCALE)),
        binom.isf(ALPHA / 2, trials, collision_probability(SCALE)),
    )
    distinct = len({row.tobytes() for row in vectors})
    ok = low <= equal <= high and distinct == len(vectors)
    return ok, (
        f"{len(vectors)} releases x {vectors.shape[1]} cells at scale {SCALE:g}: "
        f"{equal} equal pairs of {trials} (expected "
        f"{trials * collision_probability(SCALE):.0f}, 1e-6 interval [{low:.0f}, "
        f"{high:.0f}]), {distinct} distinct noise vectors"
    )


def test_repeated_secure_releases_look_independent():
    ok, figure = sanity(noise_vectors(lambda: None))
    print(f"\nFIGURE T7 secure source (what the portal uses): {figure}")
    assert ok, figure


class Coarse(RandomSource):
    """Twin: noise rounded to multiples of 3 (same spread, too few distinct values)."""

    def __init__(self):
        self.inner = mechanisms.secure_source()

    def discrete_laplace(self, scale, size):
        return 3 * np.round(self.inner.discrete_laplace(scale, size) / 3).astype(np.int64)

    def uniform(self, size):
        return self.inner.uniform(size)

    def multinomial(self, n, probabilities):
        return self.inner.multinomial(n, probabilities)

    def shuffle(self, values):
        self.inner.shuffle(values)


TWIN_RELEASES = 250  # enough for each twin: 256 seeds collide among 250 draws w.p. 1 - e^-122
TWINS = {
    "re-seeded identically": lambda: seeded_source(1),
    "256 possible seeds": lambda: seeded_source(secrets.randbelow(256)),
    "coarsened noise": Coarse,
}


@pytest.mark.parametrize("twin", TWINS)
def test_the_sanity_check_catches_a_broken_source(twin):
    ok, figure = sanity(noise_vectors(TWINS[twin], TWIN_RELEASES))
    print(f"\nFIGURE T7 twin '{twin}': {figure} -> {'NOT caught' if ok else 'caught'}")
    assert not ok, figure


# ---------------------------------------------------------------- no seed anywhere


def portal_form_classes():
    classes = []
    for module in ("dpportal.audit.forms", "dpportal.datasets.forms", "dpportal.releases.forms"):
        for _, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
            if issubclass(cls, forms.BaseForm) and cls.__module__ == module:
                classes.append(cls)
    return classes


def seed_fields(classes) -> list[str]:
    fields = {f"{cls.__name__}.{name}" for cls in classes for name in cls.base_fields}
    return sorted(f for f in fields if any(w in f.lower() for w in ("seed", "rng", "random_s")))


def test_no_form_has_a_seed_or_random_source_field():
    found = portal_form_classes()
    assert len(found) >= 8
    fields = {f"{cls.__name__}.{name}" for cls in found for name in cls.base_fields}
    offending = seed_fields(found)
    print(
        f"\nFIGURE T7 forms: {len(found)} form classes, {len(fields)} fields, "
        f"{len(offending)} accept a seed or random source"
    )
    assert offending == []

    class TwinForm(forms.Form):
        noise_seed = forms.IntegerField()

    assert seed_fields([TwinForm]) == ["TwinForm.noise_seed"]


@pytest.mark.django_db
def test_a_release_post_with_seed_fields_stores_no_seed(settings, monkeypatch):
    settings.DPPORTAL_HEARTBEAT_SECONDS = 0
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    owner = make_user()
    dataset = make_dataset(owner)
    client = Client()
    client.force_login(owner)
    response = post_new_release(
        client,
        dataset.pk,
        {
            "mechanism": "perturbed_histogram",
            "columns": ["age", "sex"],
            "epsilon": "0.5",
            "rows": "200",
            "seed": "1",
            "random_seed": "1",
            "rng": "seeded",
            "params": '{"seed": 1}',
        },
    )
    assert response.status_code == 302
    (release,) = Release.objects.all()
    assert "seed" not in str(release.params).lower() and "rng" not in release.params


@pytest.mark.parametrize(
    "name, columns, params",
    [
        ("perturbed_histogram", ["x", "g"], {}),
        ("smoothed_histogram", ["x", "g"], {"rows": 20}),
        ("mwem", ["x", "g"], {"rounds": 2}),
        ("range_count", ["x"], {"prefixes": True}),
    ],
)
def test_a_seed_parameter_never_steers_a_mechanism(name, columns, params):
    """Refused as an unknown parameter, or ignored: two runs with the same 'seed' differ."""

    def run():
        return mechanisms.run_release(
            name, DATA, SCHEMA, columns=columns, epsilon=1.0, params={**params, "seed": 7}
        )

    try:
        first, second = run(), run()
    except MechanismError as exc:
        assert "seed" in str(exc)
        return
    assert first.files != second.files
