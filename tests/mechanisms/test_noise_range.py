"""Integer noise never saturates: counts get 64-bit noise inside OpenDP, and scales whose tail
beyond what 64-bit counts can carry is not negligible (above 2^-60) are refused in one line.

Audit finding (issue 20, item 1): noise drawn on i32 zeros was clamped at +-2^31 and then added
to the counts in NumPy, so a clamped draw published `count +- 2^31` and gave the count back.

Statistics (secure source, never seeded):
- spread: N = 2000 noise values per epsilon; the number with |noise| <= scale * ln 2 is
  Binomial(N, 1/2) (the median of |X| for P(k) ~ exp(-|k|/scale), to within 1e-8 at these
  scales); two-sided binomial test, p > 1e-6 required (false-alarm rate 1e-6 per epsilon).
  Twin: the same mechanism with 0.7x the scale (expected count 0.628 N), must give p < 1e-6.
- shape: N = 2000 draws per scale; KS test of |X| / scale against Exp(1) (exact up to the
  lattice step 1/scale <= 1e-6), p > 1e-6; twin: draws at 0.7x the scale, p < 1e-6.
"""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mechanisms import noise
from mechanisms.errors import MechanismError
from mechanisms.histogram import perturbed_histogram
from mechanisms.mwem import mwem
from mechanisms.mwem.measure import TrueAnswers
from mechanisms.noise import secure_source, seeded_source
from mechanisms.schema import Schema
from mechanisms.workload import Query

P_ACCEPT = 1e-6
N = 2000
REPO_ROOT = Path(__file__).resolve().parents[2]
CELLS = 200
SCHEMA = Schema.from_dict(
    {"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 200, "bins": CELLS}]}
)
ELEVEN = pd.DataFrame({"x": [3, 3, 7, 50, 51, 90, 120, 120, 120, 180, 199]})
SATURATED = {2**31 - 1, 2**31, 2**63 - 1, 2**63}  # |noise| or |value| at an int32/int64 bound


def _saturated(values, exact) -> list[int]:
    values = [int(v) for v in np.ravel(values)]
    exact = [int(v) for v in np.ravel(exact)]
    return [
        v
        for v, e in zip(values, exact, strict=True)
        if abs(v - e) in SATURATED or abs(v) in SATURATED
    ]


class _ShrunkScale(noise._SecureSource):
    """Broken twin: the secure source adding noise at `factor` x the scale asked for."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def add_discrete_laplace(self, values, scale):
        return super().add_discrete_laplace(values, scale * self.factor)


class _Int32Clamped(noise._SecureSource):
    """Broken twin: the old path (noise clamped to int32, then added to the counts)."""

    def add_discrete_laplace(self, values, scale):
        draws = super().add_discrete_laplace(np.zeros_like(values), scale)
        return values + np.clip(draws, -(2**31) + 1, 2**31 - 1)


def _noise_of(epsilon, rng_factory, runs=N // CELLS):
    exact = SCHEMA.cell_counts(ELEVEN, ["x"])
    noises, saturated = [], []
    for _ in range(runs):
        out = perturbed_histogram(
            ELEVEN, SCHEMA, columns=["x"], epsilon=epsilon, rows=0, rng=rng_factory()
        )
        saturated += _saturated(out.released_counts, exact)
        noises.append(out.released_counts.astype(object) - exact.astype(object))
    return np.concatenate(noises).astype(float), saturated


def _median_p(noise_values, scale) -> float:
    inside = int(np.sum(np.abs(noise_values) <= scale * math.log(2)))
    return stats.binomtest(inside, len(noise_values), 0.5).pvalue


@pytest.mark.parametrize("epsilon", [1e-12, 1e-9, 1e-8])
def test_the_perturbed_histogram_at_tiny_epsilon_publishes_unsaturated_noise(epsilon):
    scale = 2 / epsilon  # replace-one: count sensitivity 2
    noise_values, saturated = _noise_of(epsilon, secure_source)
    assert saturated == [], f"{len(saturated)} counts at a saturation value"
    p = _median_p(noise_values, scale)
    twin_values, _ = _noise_of(epsilon, lambda: _ShrunkScale(0.7))
    p_twin = _median_p(twin_values, scale)
    print(
        f"\nFIGURE noise-range eps={epsilon:g} scale={scale:g}: N={N} median |noise|/scale="
        f"{np.median(np.abs(noise_values)) / scale:.4f} (theory {math.log(2):.4f}) p={p:.3g}; "
        f"twin x0.7 p={p_twin:.3g}"
    )
    assert p > P_ACCEPT and p_twin < P_ACCEPT


def test_the_saturation_check_catches_int32_clamped_noise():
    _, saturated = _noise_of(1e-12, _Int32Clamped, runs=1)
    assert len(saturated) > CELLS // 2


@pytest.mark.parametrize("scale", [1e6, 1e10, 1e15])
def test_secure_draws_at_large_scales_fit_the_discrete_laplace(scale):
    source = secure_source()
    base = np.full(N, 10**12, dtype=np.int64)
    added = source.add_discrete_laplace(base, scale)
    assert added.dtype == np.int64 and not _saturated(added, base)
    plain = source.discrete_laplace(scale, N)
    twin = source.discrete_laplace(scale * 0.7, N)
    p = [
        stats.kstest(np.abs(np.asarray(x, dtype=float)) / scale, "expon").pvalue
        for x in (added - 10**12, plain, twin)
    ]
    print(
        f"\nFIGURE noise-range secure discrete Laplace scale {scale:g}, N={N}: KS p added="
        f"{p[0]:.3g} drawn={p[1]:.3g}; twin x0.7 p={p[2]:.3g}"
    )
    assert p[0] > P_ACCEPT and p[1] > P_ACCEPT and p[2] < P_ACCEPT


def test_secure_discrete_gaussian_at_a_large_scale_fits_the_half_normal():
    sigma = 1e12
    draws = secure_source().discrete_gaussian(sigma, N)
    twin = secure_source().discrete_gaussian(sigma * 0.7, N)
    p = [stats.kstest(np.abs(x) / sigma, "halfnorm").pvalue for x in (draws, twin)]
    assert p[0] > P_ACCEPT and p[1] < P_ACCEPT


@pytest.mark.parametrize("source", [secure_source, lambda: seeded_source(4)])
def test_every_source_refuses_integer_scales_beyond_64_bits(source):
    rng = source()
    limit = noise.MAX_INTEGER_SCALE
    assert not _saturated(rng.discrete_laplace(limit, 50), np.zeros(50))
    for call in (
        lambda s: rng.discrete_laplace(s, 3),
        lambda s: rng.add_discrete_laplace(np.zeros(3, dtype=np.int64), s),
        lambda s: rng.discrete_gaussian(s, 3),
    ):
        with pytest.raises(MechanismError, match="too large for 64-bit counts") as caught:
            call(limit * 1.01)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("source", [secure_source, lambda: seeded_source(4)])
def test_float_noise_is_finite_up_to_its_limit_and_refused_beyond(source):
    rng = source()
    for primitive in (rng.laplace, rng.gaussian):
        assert np.all(np.isfinite(primitive(noise.MAX_FLOAT_SCALE, 200)))
        with pytest.raises(MechanismError, match="too large for 64-bit floats"):
            primitive(noise.MAX_FLOAT_SCALE * 1.01, 3)


def test_counts_that_cannot_take_noise_without_overflow_are_refused():
    with pytest.raises(MechanismError, match="counts"):
        secure_source().add_discrete_laplace(np.array([2**62], dtype=np.int64), 1.0)


def test_the_perturbed_histogram_refuses_epsilon_too_small_for_64_bits():
    with pytest.raises(MechanismError, match=r"epsilon \(1e-30\) is too small") as caught:
        perturbed_histogram(ELEVEN, SCHEMA, columns=["x"], epsilon=1e-30)
    assert "use epsilon >=" in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_line_refuses_epsilon_too_small_in_one_line(tmp_path):
    data, schema = tmp_path / "data.csv", tmp_path / "schema.json"
    ELEVEN.to_csv(data, index=False)
    schema.write_text(
        '{"columns": [{"name": "x", "type": "numeric", "lower": 0, "upper": 200, "bins": 20}]}'
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mechanisms",
            "perturbed-histogram",
            "--input",
            str(data),
            "--schema",
            str(schema),
            "--epsilon",
            "1e-30",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.startswith("error: epsilon (1e-30) is too small")
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_mwem_refuses_epsilon_too_small_for_64_bits_before_drawing():
    codes = np.array([[0, 1], [1, 1], [1, 0]])
    source = noise.RecordingSource(seeded_source(1))
    with pytest.raises(MechanismError, match=r"epsilon \(1e-16\) is too small"):
        mwem(codes, (2, 2), [Query((0, 1))], epsilon=1e-16, rounds=200, rng=source)
    assert source.noise_calls() == []


def test_mwem_at_the_forms_limits_publishes_no_saturated_measurement():
    """epsilon = 1e-6 (the portal form's minimum) and 200 rounds (its maximum)."""
    codes = np.random.default_rng(3).integers(0, 3, size=(500, 3))
    shape = (3, 3, 3)
    workload = [Query(a) for a in ((0, 1), (0, 2), (1, 2))]
    result = mwem(codes, shape, workload, epsilon=1e-6, rounds=200, mw_passes=1)
    true = TrueAnswers(codes, shape)
    measured = saturated = 0
    for record in result.measurements:
        exact = true.answer(record["query"])
        saturated += len(_saturated(record["noisy_answer"], exact))
        measured += len(exact)
    assert measured >= 200 * 9 and saturated == 0


def _portal_dataset():
    from types import SimpleNamespace

    schema = {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 200, "bins": 20},
            {"name": "g", "type": "categorical", "categories": ["a", "b"]},
        ]
    }
    return SimpleNamespace(schema=schema, neighbouring="replace-one", row_count=11)


@pytest.mark.parametrize(
    "mechanism, params",
    [
        ("perturbed_histogram", {}),
        ("mwem", {"workload": {"queries": [{"type": "marginals", "k": 2}]}, "rounds": 200}),
    ],
)
def test_the_portal_preview_refuses_a_too_small_epsilon_and_accepts_the_forms_minimum(
    mechanism, params
):
    """The form's dry run turns this MechanismError into a form error (test_release_pages)."""
    from decimal import Decimal

    from dpportal.releases import engine as release_engine

    kwargs = {"mechanism": mechanism, "columns": ["x", "g"], "params": params}
    lines = release_engine.expected_accuracy(
        _portal_dataset(), epsilon=Decimal("0.000001"), **kwargs
    )
    assert lines and all(str(float("inf")) not in line for line in lines)
    with pytest.raises(MechanismError, match=r"epsilon \(1e-20\) is too small"):
        release_engine.expected_accuracy(_portal_dataset(), epsilon=Decimal("1e-20"), **kwargs)
