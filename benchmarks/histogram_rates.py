"""Monte Carlo L2 risk of both histogram releases against n, with fitted log-log slopes.

Data: n i.i.d. rows from f(x) = prod_i 6 x_i (1 - x_i) on [0, 1]^r (Beta(2, 2) marginals),
r = 1 and 2, epsilon = 1, replace-one. Risk: E integral (f_hat - f)^2, where f_hat is the
histogram (same bins as the release) of the released synthetic rows; computed exactly per cell.

- perturbed (Thm 4.4): bins per dimension round(n^(1/(2+r))), k = n rows.
  Theory: risk ~ n^(-2/(2+r)), the minimax rate.
- smoothed (Thm 4.1/4.3): bins per dimension round(n^(1/(2r+3))), mix = n^(-1/(2r+3)), k the
  largest row count eq. (6) allows. Theory (balancing h^2, mix^2 and 1/(k h^r) under
  k ~ epsilon n mix h^r): risk ~ n^(-2/(2r+3)), slower than minimax.

    .venv/bin/python benchmarks/histogram_rates.py [--reps R] [--max-exponent 6]
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms import Schema, max_rows, perturbed_histogram, seeded_source  # noqa: E402
from mechanisms.histogram import smoothed_histogram  # noqa: E402

EPSILON = 1.0


def beta22_cdf(x):
    return 3 * x**2 - 2 * x**3


def l2_risk(p_hat: np.ndarray, bins: int, r: int) -> float:
    """Integral of (f_hat - f)^2 with f_hat = p_hat / volume on each of bins^r equal cells."""
    edges = np.linspace(0, 1, bins + 1)
    mass_1d = np.diff(beta22_cdf(edges))
    true_mass = mass_1d if r == 1 else np.outer(mass_1d, mass_1d)
    volume = (1 / bins) ** r
    integral_f_squared = 1.2**r  # integral of (6x(1-x))^2 = 36/30 per dimension
    return float(
        np.sum(p_hat**2) / volume - 2 * np.sum(p_hat * true_mass) / volume + integral_f_squared
    )


def make_schema(r: int, bins: int) -> Schema:
    return Schema.from_dict(
        {
            "columns": [
                {"name": f"x{i}", "type": "numeric", "lower": 0, "upper": 1, "bins": bins}
                for i in range(r)
            ]
        }
    )


def one_risk(mechanism: str, n: int, r: int, seed: int) -> tuple[float, int, int]:
    data_rng = np.random.default_rng(seed)  # benchmark data only
    data = pd.DataFrame({f"x{i}": data_rng.beta(2, 2, n) for i in range(r)})
    rng = seeded_source(seed)
    if mechanism == "perturbed":
        bins = max(1, round(n ** (1 / (2 + r))))
        schema = make_schema(r, bins)
        out = perturbed_histogram(data, schema, columns=None, epsilon=EPSILON, rng=rng)
    else:
        bins = max(1, round(n ** (1 / (2 * r + 3))))
        schema = make_schema(r, bins)
        mix = n ** (-1 / (2 * r + 3))
        rows = math.floor(max_rows(EPSILON, n, bins**r, mix))
        out = smoothed_histogram(
            data, schema, columns=None, epsilon=EPSILON, rows=rows, mix=mix, rng=rng
        )
    counts = schema.cell_counts(out.synthetic, None).astype(float)
    return l2_risk(counts / counts.sum(), bins, r), bins, len(out.synthetic)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--max-exponent", type=float, default=6.0)
    args = parser.parse_args()
    ns = [round(10**e) for e in np.arange(3.0, args.max_exponent + 0.01, 0.5)]
    theory = {"perturbed": lambda r: -2 / (2 + r), "smoothed": lambda r: -2 / (2 * r + 3)}
    started = time.perf_counter()
    summary = []
    for mechanism in ("perturbed", "smoothed"):
        for r in (1, 2):
            print(f"\n{mechanism} histogram, r = {r}, epsilon = {EPSILON}, {args.reps} reps")
            print(f"{'n':>10}{'bins/dim':>10}{'rows k':>10}{'L2 risk':>12}{'std err':>11}")
            risks = []
            for n in ns:
                runs = [one_risk(mechanism, n, r, seed) for seed in range(args.reps)]
                values = np.array([v for v, _, _ in runs])
                risks.append(values.mean())
                print(
                    f"{n:>10}{runs[0][1]:>10}{runs[0][2]:>10}{values.mean():>12.5f}"
                    f"{values.std(ddof=1) / math.sqrt(len(values)):>11.5f}"
                )
            slope = np.polyfit(np.log(ns), np.log(risks), 1)[0]
            summary.append((mechanism, r, slope, theory[mechanism](r)))
    print(f"\n{'mechanism':<12}{'r':>3}{'fitted slope':>14}{'theory':>9}")
    for mechanism, r, slope, expected in summary:
        print(f"{mechanism:<12}{r:>3}{slope:>14.3f}{expected:>9.3f}")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
