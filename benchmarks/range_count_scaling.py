"""Range counting: error scaling of mn12 against the baselines, box routing, and speed.

Run:  .venv/bin/python benchmarks/range_count_scaling.py [--quick] [--big] [--only-t4]

Error is the mean over the workload of each answer's exact predicted variance (analytic, from
the public plan; test T3 checks it against Monte Carlo), at rho = 0.5 zCDP, add/remove.
Tables (docs/range-count.md section 4.3):
  T4   2-D halfplanes on uniform / grid / zigzag points, n = 1024..8192, m = 4n: fitted log-log
       slopes (targets: identity ~1, mn12 <= 0.70) and mn12 / identity at the largest n (<= 0.3);
       path_tree (Hilbert path + binary tree; chain sums and GLS) and the criterion
       mn12 <= path_tree on zigzag at n >= 2048
  T4b  growth in m at n = 1024: per-query grows ~linearly, mn12 within +-15% of its m = 4n value
  T6   boxes: 1-D N = 4096 prefixes + 2000 random ranges, 2-D 256x256 2000 random rectangles:
       auto never mn12, within 1.25x of the best of tree and identity
  3-D  halfspaces in the unit cube (asymptotic slope 2/3)
  speed: n = 4096, m = 16000 planned + answered (target < 60 s); --big adds n = 10^4, m = 10^5
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.range_count.api import build_plan, choose_plan, range_count  # noqa: E402
from mechanisms.range_count.core import (  # noqa: E402
    noise_variance,
    popcount,
    privacy_target,
    unique_rows,
)
from mechanisms.range_count.inputs import (  # noqa: E402
    all_prefixes,
    grid_support,
    incidence,
    point_support,
    random_boxes,
    random_halfspaces,
)
from mechanisms.range_count.mn12 import _plan_levels, nested_packing, plan_round  # noqa: E402

TARGET = replace(privacy_target(epsilon=1.0, delta=1e-6, neighbouring="add-remove"), rho=0.5)


def points(kind: str, n: int, dim: int, seed: int) -> np.ndarray:
    rng = seeded_source(seed)
    if kind == "uniform":
        return rng.uniform((n, dim))
    if kind == "grid":
        side = round(n ** (1 / dim))
        axes = [(np.arange(side) + 0.5) / side] * dim
        return np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1)
    t = (np.arange(n) + 0.5) / n  # zigzag: (t -+ eta, t +- eta) with alternating signs
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return np.stack([t - sign * 1e-3, t + sign * 1e-3], axis=1)


def workload(kind: str, support, m: int, seed: int) -> list[dict]:
    rng = seeded_source(seed)
    if kind != "zigzag":
        return random_halfspaces(support, m, rng)
    half = random_halfspaces(support, m - m // 2, rng)
    angle = math.pi / 4 + (rng.uniform(m // 2) - 0.5) * 2e-3  # near-diagonal lines
    normal = np.stack([-np.sin(angle), np.cos(angle)], axis=1)
    through = support.points[rng.integers(support.n, m // 2)]
    return half + [
        {"type": "halfspace", "a": a.tolist(), "b": float(a @ p)}
        for a, p in zip(normal, through, strict=True)
    ]


def mean_error(name: str, support, queries, bits, estimator="chain") -> tuple[float, float]:
    start = time.perf_counter()
    plan = build_plan(name, support, queries, bits, TARGET)
    if name == "path_tree":
        var = plan.predicted_variance(bits, estimator)
    elif estimator == "gls":
        zero = {
            "rounds": [
                {"pieces": np.zeros(len(r.pieces)), "points": np.zeros(len(r.x_points))}
                for r in plan.rounds
            ],
            "leftover": np.zeros(len(plan.leftover)),
        }
        var = plan.answer(zero, bits, "gls")[1]
    else:
        var = plan.predicted_variance(bits)
    return float(var.mean()), time.perf_counter() - start


def slope(ns, errs) -> float:
    return float(np.polyfit(np.log(ns), np.log(errs), 1)[0])


def halfplane_scaling(ns, sets, dim=2, gls_upto=8192):
    print(f"\n## T4: {dim}-D halfspaces, m = 4n, mean predicted variance at rho = 0.5")
    print(
        "| points | n | distinct | identity | per_query | mn12 | mn12 gls | path_tree "
        "| path_tree gls | mn12/identity | mn12 plan s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    summary, table = {}, {}
    for kind in sets:
        rows = table[kind] = []
        for n in ns:
            support = point_support(list("xyz")[:dim], [(0, 1)] * dim, points(kind, n, dim, n))
            queries = workload(kind, support, 4 * n, n + 1)
            bits = incidence(support, queries)
            distinct = len(np.unique(bits, axis=0))
            ident, _ = mean_error("identity", support, queries, bits)
            perq, _ = mean_error("per_query", support, queries, bits)
            mn12, secs = mean_error("mn12", support, queries, bits)
            gls = (
                mean_error("mn12", support, queries, bits, "gls")[0]
                if n <= gls_upto
                else float("nan")
            )
            path, path_gls = (
                mean_error("path_tree", support, queries, bits, est)[0] for est in ("chain", "gls")
            )
            rows.append((n, ident, perq, mn12, gls, path, path_gls))
            print(
                f"| {kind} | {support.n} | {distinct} | {ident:.1f} | {perq:.1f} | {mn12:.1f} | "
                f"{gls:.1f} | {path:.1f} | {path_gls:.1f} | {mn12 / ident:.3f} | {secs:.1f} |",
                flush=True,
            )
        arr = np.array(rows)
        summary[kind] = {
            "identity": slope(arr[:, 0], arr[:, 1]),
            "per_query": slope(arr[:, 0], arr[:, 2]),
            "mn12": slope(arr[:, 0], arr[:, 3]),
            "mn12 last doubling": slope(arr[-2:, 0], arr[-2:, 3]),
            "mn12/identity at max n": arr[-1, 3] / arr[-1, 1],
            "path_tree": slope(arr[:, 0], arr[:, 5]),
        }
        if not np.isnan(arr[:, 4]).all():
            ok = ~np.isnan(arr[:, 4])
            summary[kind]["mn12 gls"] = slope(arr[ok, 0], arr[ok, 4])
            summary[kind]["gls/identity at largest gls n"] = arr[ok][-1, 4] / arr[ok][-1, 1]
    print(f"\n### fitted log-log slopes ({dim}-D)")
    print("| points | " + " | ".join(next(iter(summary.values())).keys()) + " |")
    for kind, values in summary.items():
        print(f"| {kind} | " + " | ".join(f"{v:.3f}" for v in values.values()) + " |")
    if "zigzag" in sets:
        print_path_tree_criterion(table["zigzag"])
    return summary


def print_path_tree_criterion(rows) -> None:
    """T4: mn12 <= path_tree on zigzag at n >= 2048, chain sums against chain sums and least
    squares against least squares."""
    print("\n### T4 criterion: mn12 <= path_tree on zigzag at n >= 2048")
    print(
        "| n | mn12 | path_tree | mn12 gls | path_tree gls | chain: mn12 <= path_tree "
        "| gls: mn12 <= path_tree |"
    )
    print("|---|---|---|---|---|---|---|")
    for n, _, _, mn12, mn12_gls, path, path_gls in rows:
        if n >= 2048:
            print(
                f"| {n:.0f} | {mn12:.1f} | {path:.1f} | {mn12_gls:.1f} | {path_gls:.1f} | "
                f"{'pass' if mn12 <= path else 'FAIL'} | "
                f"{'pass' if mn12_gls <= path_gls else 'FAIL'} |"
            )


def growth_in_m(n=1024, factors=(1, 4, 16, 32)):
    print(f"\n## T4b: growth in m, uniform, n = {n}")
    print("| m | identity | per_query | mn12 | mn12 / mn12(m=4n) |")
    print("|---|---|---|---|---|")
    support = point_support(["x", "y"], [(0, 1), (0, 1)], points("uniform", n, 2, 7))
    results = {}
    for f in factors:
        queries = workload("uniform", support, f * n, 8)
        bits = incidence(support, queries)
        results[f] = [
            mean_error(name, support, queries, bits)[0]
            for name in ("identity", "per_query", "mn12")
        ]
    for f, (ident, perq, mn12) in results.items():
        print(f"| {f * n} | {ident:.1f} | {perq:.1f} | {mn12:.1f} | {mn12 / results[4][2]:.3f} |")


def boxes():
    print("\n## T6: boxes (predicted mean variance, rho = 0.5; auto's pick)")
    print("| case | identity | tree | per_query | auto picks | auto / best(tree, identity) |")
    print("|---|---|---|---|---|---|")
    one = grid_support(["x"], [(0, 1)], (4096,))
    two = grid_support(["x", "y"], [(0, 1), (0, 1)], (256, 256))
    cases = {
        "1-D N=4096 prefixes + 2000 ranges": (
            one,
            all_prefixes(one) + random_boxes(one, 2000, seeded_source(9)),
        ),
        "2-D 256x256 2000 rectangles": (two, random_boxes(two, 2000, seeded_source(10))),
    }
    for label, (support, queries) in cases.items():
        bits = incidence(support, queries)
        plan, predicted = choose_plan("auto", support, queries, bits, TARGET)
        best = min(predicted["tree"], predicted["identity"])
        print(
            f"| {label} | {predicted['identity']:.1f} | {predicted['tree']:.1f} | "
            f"{predicted['per_query']:.1f} | {plan.name} | {predicted[plan.name] / best:.3f} |"
        )


def all_ranges_gram(cells: int) -> np.ndarray:
    """W^T W for the workload of all intervals of a 1-D axis: ranges holding both i and j."""
    i = np.arange(cells)
    return (np.minimum.outer(i, i) + 1.0) * (cells - np.maximum.outer(i, i))


def hdmm_reference(side: int = 256, published_rmse: float = 32.69):
    """Our tree's exact RMSE on ALL 2-D ranges of a side x side grid, in HDMM's convention.

    HDMM's README reports RMSE 32.69 for all 2-D ranges on 256x256 at eps = sqrt(2), pure DP,
    add/remove (its `error.rootmse`; docs/range-count.md section 3). HDMM is AGPL and not on the
    package index, so it is not run; its published figure is quoted. Our tree is a Kronecker
    product of per-axis trees with equal noise and least-squares answers, so the mean variance
    over the product workload factorises: v * prod_axes tr(G_a (A_a^T A_a)^-1) / m_a.
    """
    target = privacy_target(epsilon=math.sqrt(2), delta=0, neighbouring="add-remove")
    tree = build_plan(
        "tree", grid_support(["x", "y"], [(0, 1)] * 2, (side, side)), [], None, target
    )
    gram, ranges = all_ranges_gram(side), side * (side + 1) / 2
    per_axis = [float(np.sum(gram * k)) / ranges for k in tree.gram_inverse]  # tr(GK), K symmetric
    tree_rmse = math.sqrt(noise_variance(tree.noise, tree.scale) * math.prod(per_axis))
    identity_rmse = math.sqrt(1.0 * (np.trace(gram) / ranges) ** 2)  # Laplace(1/eps): variance 1
    print(f"\n## all 2-D ranges on {side}x{side}, eps = sqrt(2), pure DP (HDMM's convention)")
    print("| method | RMSE per query |")
    print("|---|---|")
    print(f"| identity | {identity_rmse:.2f} |")
    print(f"| tree (ours, branching {tree.branching}, least squares) | {tree_rmse:.2f} |")
    print(f"| HDMM (published, not run here) | {published_rmse:.2f} |")


def first_round_terms(n: int, dim: int, levels: int | None = None):
    """mn12's first round on uniform points, m = 4n: (J, a, u_0, predicted).

    a_i = sqrt(u_i D_i) per level (u_i pieces a query uses, D_i mean load), u_0 = mean
    |R diff anchor|; the predicted rate is (sum_i a_i + sqrt(u_0))^2 (docs/range-count.md 2.4, 4.3).
    With `levels`, J is forced to that value instead of the planner's choice.
    """
    support = point_support(list("xyz")[:dim], [(0, 1)] * dim, points("uniform", n, dim, n))
    bits = incidence(support, workload("uniform", support, 4 * n, n + 1))
    rows, _, _, mult = unique_rows(bits[popcount(bits) > 0])
    if levels is None:
        _, j, opt = plan_round(rows, n, mult.astype(float), dim)
    else:
        j = levels
        opt = _plan_levels(rows, n, mult.astype(float), nested_packing(rows, n, j), j, 0.9)
    a = np.sqrt(opt["use"][1:] * opt["mean_load"][1:])
    return j, a, float(opt["use"][0]), opt["predicted"]


def rate_formula(ns, dim=3, model_levels=4):
    """The predicted-rate formula on the planner's own choices, and where its slope goes."""
    print(
        f"\n## {dim}-D: predicted rate (sum_i sqrt(u_i D_i) + sqrt(u_0))^2 of mn12's first "
        "round (relative units; the planner's J)"
    )
    print(
        "| n | i0 | J | sum sqrt(u_i D_i) | sqrt(u_0) | share of sqrt(u_0) | rate | "
        "round-1 predicted |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rates = []
    for n in ns:
        j, a, u0, predicted = first_round_terms(n, dim)
        rate = (a.sum() + math.sqrt(u0)) ** 2
        rates.append(rate)
        print(
            f"| {n} | {math.log2(n) / dim:.2f} | {j} | {a.sum():.2f} | {math.sqrt(u0):.2f} | "
            f"{math.sqrt(u0) / (a.sum() + math.sqrt(u0)):.2f} | {rate:.0f} | {predicted:.0f} |"
        )
    print(f"rate slope {slope(ns, rates):.3f}, last doubling {slope(ns[-2:], rates[-2:]):.3f}")
    n = ns[-1]
    _, a, u0, _ = first_round_terms(n, dim, levels=model_levels)
    ratio = a[-1] / a[-2]
    print(
        f"\nModel from n = {n}, J = {model_levels}: a_i measured for i <= {model_levels}, "
        f"then x{ratio:.2f} per level; u_0 = {u0 / (n / 2**model_levels):.3f} n 2^-J; "
        f"asymptotic exponent log(r^2)/log(2 r^2) = "
        f"{math.log(ratio**2) / math.log(2 * ratio**2):.3f}"
    )
    print("| n | best J | model rate | slope over the last 3 doublings |")
    print("|---|---|---|---|")
    previous = None
    for k in range(9, 28, 3):
        terms = np.concatenate([a, a[-1] * ratio ** np.arange(1, 40)])
        options = [
            (
                terms[:j].sum()
                + math.sqrt(u0 * 2.0 ** (k - math.log2(n)) * 2.0 ** (model_levels - j))
            )
            ** 2
            for j in range(1, 40)
        ]
        best = int(np.argmin(options))
        note = f"{math.log(options[best] / previous) / math.log(8):.3f}" if previous else ""
        print(f"| 2^{k} | {best + 1} | {options[best]:.0f} | {note} |")
        previous = options[best]


def laplace_reading(ns, epsilon=1.0, delta=1e-6):
    """mn12 (Gaussian, zCDP) against mn12_laplace (the seed's reading), same plans."""
    target = privacy_target(epsilon=epsilon, delta=delta, neighbouring="add-remove")
    print(
        f"\n## mn12 noise: Gaussian/zCDP (section 2.4) vs mn12_laplace, Laplace + advanced "
        f"composition per point (section 2.2 reading), same plans, uniform 2-D, m = 4n, "
        f"({epsilon}, {delta})-DP"
    )
    print("| n | identity (Gaussian) | mn12 Gaussian | mn12 Laplace reading | Laplace / Gaussian |")
    print("|---|---|---|---|---|")
    for n in ns:
        support = point_support(["x", "y"], [(0, 1), (0, 1)], points("uniform", n, 2, n))
        queries = workload("uniform", support, 4 * n, n + 1)
        bits = incidence(support, queries)
        ident, g, lap = (
            build_plan(name, support, queries, bits, target).predicted_variance(bits).mean()
            for name in ("identity", "mn12", "mn12_laplace")
        )
        print(f"| {n} | {ident:.0f} | {g:.0f} | {lap:.0f} | {lap / g:.2f} |", flush=True)


def speed(n: int, m: int, label: str, estimator: str = "auto"):
    support = point_support(["x", "y"], [(0, 1), (0, 1)], points("uniform", n, 2, 11))
    queries = workload("uniform", support, m, 12)
    x = seeded_source(13).integers(20, n)
    start, cpu = time.perf_counter(), time.process_time()
    r = range_count(
        x,
        support,
        queries,
        epsilon=1.0,
        delta=1e-6,
        mechanism="mn12",
        estimator=estimator,
        rng=seeded_source(14),
    )
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(
        f"| {label} | {n} | {m} | mn12/{r.structure['estimator']} | {secs:.1f} | {cpu:.1f} | "
        f"{len(r.accounting['rounds'])} | {r.variance.mean():.1f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 2048 only")
    parser.add_argument(
        "--big", action="store_true", help="also n = 10^4, m = 10^5, and n = 16384 in 3-D (slow)"
    )
    parser.add_argument("--only-big", action="store_true", help="just the n = 10^4 run")
    parser.add_argument("--only-laplace", action="store_true", help="just the Laplace reading")
    parser.add_argument("--only-speed", action="store_true", help="just the n = 4096 speed run")
    parser.add_argument("--only-t4", action="store_true", help="just the 2-D halfplane table")
    parser.add_argument("--only-3d", action="store_true", help="just the 3-D halfspace table")
    args = parser.parse_args()
    ns3 = (
        [512, 1024, 2048]
        if args.quick
        else [512, 1024, 2048, 4096, 8192] + ([16384] if args.big else [])
    )  # --big: n = 16384 plans in about 5 minutes
    if args.only_3d:
        halfplane_scaling(ns3, ("uniform",), dim=3)
        return
    if args.only_t4:
        halfplane_scaling(
            [1024, 2048] if args.quick else [1024, 2048, 4096, 8192], ("uniform", "grid", "zigzag")
        )
        return
    if args.only_laplace:
        laplace_reading([1024, 2048, 4096])
        return
    if not (args.only_big or args.only_speed):
        ns = [1024, 2048] if args.quick else [1024, 2048, 4096, 8192]
        halfplane_scaling(ns, ("uniform", "grid", "zigzag"))
        growth_in_m()
        boxes()
        hdmm_reference()
        halfplane_scaling(ns3, ("uniform",), dim=3)
        rate_formula(ns3)
        laplace_reading([1024, 2048] if args.quick else [1024, 2048, 4096])
    print("\n## speed (planned + measured + answered, 2 cores, wall clock)")
    print("| case | n | m | mechanism/estimator | wall s | cpu s | rounds | mean variance |")
    print("|---|---|---|---|---|---|---|---|")
    if not args.only_big:
        speed(4096, 16000, "T7-small", "chain")
        speed(4096, 16000, "T7-small", "auto")
    if args.big or args.only_big:
        speed(10_000, 100_000, "T7-big")


if __name__ == "__main__":
    main()
