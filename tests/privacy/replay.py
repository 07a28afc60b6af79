"""Record-and-replay helpers (docs/testing-privacy.md 2): the epsilon each recorded noise call
spends, from its recorded scale and the sensitivity the mechanism declares, and the inputs of
each noise call as a zero-noise run publishes them."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd

from mechanisms.accounting import zcdp_to_approx_dp
from mechanisms.range_count import api as range_api


def _marginal_sensitivity(neighbouring: str) -> int:
    return 2 if neighbouring == "replace-one" else 1


def recorded_epsilon(name: str, calls, output, *, neighbouring: str, delta: float) -> float:
    """Total epsilon of the recorded noise calls (primitive, scale) of one release.

    perturbed histogram: one discrete Laplace call, epsilon = sensitivity / scale.
    mwem: selections 2 / scale (scores of sensitivity 1); measurements sensitivity / scale,
    matched in order with measurements.json (marginal: 2 or 1, box: 1).
    range_count: the plan's per-point loads at the recorded scale(s) (pure: max load x factor /
    scale; zCDP: rho = factor / 2 x max load / sigma^2, converted at the requested delta).
    smoothed histogram: no noise calls; its eq. (6) bound from the manifest.
    """
    if name == "perturbed_histogram":
        (call,) = calls
        return output.manifest["guarantee"]["sensitivity"] / call.scale
    if name == "smoothed_histogram":
        assert calls == []
        return float(output.manifest["accounting"]["epsilon"])
    if name == "mwem":
        return _mwem_epsilon(calls, output, neighbouring)
    if name == "range_count":
        return _range_epsilon(calls, output, neighbouring, delta)
    raise AssertionError(f"no accounting rule for {name}")


def _mwem_epsilon(calls, output, neighbouring) -> float:
    measurements = json.loads(output.files["measurements.json"])["measurements"]
    measure_calls = [c for c in calls if c.primitive == "discrete_laplace"]
    assert len(measure_calls) == len(measurements)
    total = sum(2.0 / c.scale for c in calls if c.primitive == "report_noisy_max")
    for call, m in zip(measure_calls, measurements, strict=True):
        assert call.scale == m["noise_scale"]
        sensitivity = 1 if m["query"]["type"] == "box" else _marginal_sensitivity(neighbouring)
        total += sensitivity / call.scale
    return total


def _range_epsilon(calls, output, neighbouring, delta) -> float:
    structure = json.loads(output.files["structure.json"])
    _, plan, _ = range_api.load_structure(structure)
    factor = _marginal_sensitivity(neighbouring)
    assert {c.scale for c in calls} == {plan.scale}, "a noise call at a scale the plan lacks"
    loads = plan.point_loss() * (plan.scale**2 if plan.noise == "gaussian" else plan.scale)
    if plan.noise == "gaussian":
        rho = factor / 2 * float(loads.max()) / plan.scale**2
        return zcdp_to_approx_dp(rho, delta)
    return factor * float(loads.max()) / plan.scale


def noise_inputs(name: str, output) -> list[np.ndarray]:
    """What each noise call was added to, read from a release made with zero noise."""
    if name == "perturbed_histogram":
        table = pd.read_csv(io.BytesIO(output.files["noisy_counts.csv"]))
        return [table["noisy_count"].to_numpy()]
    if name == "mwem":
        measurements = json.loads(output.files["measurements.json"])["measurements"]
        return [np.array(m["noisy_answer"]) for m in measurements]
    if name == "range_count":
        noisy = json.loads(output.files["structure.json"])["noisy"]
        return [np.asarray(v) for v in _leaves(noisy)]
    return []


def _leaves(value):
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _leaves(value[key])
    elif value and isinstance(value, list) and isinstance(value[0], dict):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def realised_loss(name: str, out_d, out_d2, calls, *, neighbouring: str) -> float:
    """Privacy loss that the difference of the noise calls' inputs would cost at the recorded
    scales (|input_D - input_D'|_1 / scale for Laplace, |.|_2^2 / (2 sigma^2) as rho for the
    Gaussian), to compare with the release's declared budget."""
    inputs = list(zip(noise_inputs(name, out_d), noise_inputs(name, out_d2), strict=True))
    scales = [c for c in calls if c.primitive in ("discrete_laplace", "discrete_gaussian")]
    if name == "mwem":  # compare measurements of the same query only
        m1 = json.loads(out_d.files["measurements.json"])["measurements"]
        m2 = json.loads(out_d2.files["measurements.json"])["measurements"]
        keep = [i for i, (a, b) in enumerate(zip(m1, m2, strict=True)) if a["query"] == b["query"]]
        inputs, scales = [inputs[i] for i in keep], [scales[i] for i in keep]
    if name == "range_count":
        scale = scales[0].scale
        gaussian = scales[0].primitive == "discrete_gaussian"
        diff = np.concatenate([np.ravel(a) - np.ravel(b) for a, b in inputs])
        return (
            float((diff**2).sum() / (2 * scale**2))
            if gaussian
            else float(np.abs(diff).sum() / scale)
        )
    return float(
        sum(np.abs(a - b).sum() / c.scale for (a, b), c in zip(inputs, scales, strict=True))
    )


def declared_loss_budget(
    name: str, output, *, epsilon: float, delta: float, neighbouring: str
) -> float:
    """The budget `realised_loss` must stay within: epsilon (pure) or rho (zCDP)."""
    if name == "range_count" and delta > 0:
        return float(output.manifest["guarantee"]["rho"]) * (1 + 1e-9)
    if name == "mwem":  # measurements only (selections are audited in T2)
        split = output.manifest["accounting"]
        return split["epsilon"] - sum(split["per_round_select"]) + 1e-12
    return epsilon * (1 + 1e-9)


def approx_equal(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)
