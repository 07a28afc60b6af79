"""Our MWEM against public implementations on UCI Adult: wall time, peak memory, 2-/3-way TVD.

    .venv/bin/python benchmarks/mwem_peers.py [--methods ours,independent,aim,snsynth,mwem_pgm]
        [--datasets adult4,adult8] [--eps 0.1,1,10] [--seeds 3] [--timeout 600]

Every run is its own subprocess, so peak memory is that run's maximum resident set size
(getrusage in the worker; it includes the interpreter and the method's libraries). Peers run in their own
virtual environments (benchmarks/requirements-peers-*.txt), found at /tmp/peer-<name>/bin/python:

    python3.11 -m venv /tmp/peer-aim && /tmp/peer-aim/bin/pip install -r benchmarks/requirements-peers-aim.txt

Methods:
  ours          mechanisms.mwem, workload = all 2-way and 3-way marginals, defaults otherwise.
  independent   noisy 1-way marginals (all ε, discrete Laplace), rows from their product.
  aim           OpenDP's AIM (make_contingency_table, dp.mbi.AIM) at the zCDP ρ that implies
                (ε, 1e-9)-DP (a weaker guarantee than our pure ε-DP), privacy unit
                contributions=2 (a replaced row).
  snsynth       SmartNoise Synth MWEMSynthesizer, split_factor=3 on the 8-column data (its
                defaults do not finish there), defaults on the 4-column data.
  mwem_pgm      MWEM with private-pgm (mbi 2.x) estimation: our driver of the published
                algorithm (MWEM+PGM, zCDP at the same ρ as aim, Gaussian noise, mirror descent), since
                the mbi package ships the estimator but not the MWEM script.
Time is the fit plus sampling n rows, measured inside the worker (imports excluded).
TVD: average over every 2-way (3-way) marginal of ½‖p_synthetic − p_true‖₁.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "demo" / "adult.csv.gz"  # UCI Adult, CC BY 4.0 (demo/README.md)
WORK = Path("/tmp/mwem_peers")
PEER_PYTHON = {
    "aim": "/tmp/peer-aim/bin/python",
    "snsynth": "/tmp/peer-snsynth/bin/python",
    "mwem_pgm": "/tmp/peer-mbi/bin/python",
}
COLUMNS = {
    "adult8": [
        "age",
        "workclass",
        "education",
        "marital-status",
        "occupation",
        "race",
        "sex",
        "income",
    ],
    "adult4": ["age", "education", "marital-status", "occupation"],
}
PEER_DELTA = 1e-9  # zCDP peers are run at the ρ that gives (ε, δ)-DP; ours is pure ε-DP
MISSING_ALLOWED = {"workclass", "occupation"}  # '?' in the source: the "(other)" cell


# --- driver -------------------------------------------------------------------------------------


def prepare(dataset: str) -> tuple[Path, list[int]]:
    """Encode Adult's columns through a public schema; save the codes for the workers."""
    import pandas as pd

    sys.path.insert(0, str(REPO))
    from mechanisms.schema import Schema

    columns = COLUMNS[dataset]
    frame = pd.read_csv(DATA, skipinitialspace=True, dtype=str, na_values=["?"])
    frame["age"] = frame["age"].astype(float)
    spec = [{"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 10}]
    for c in columns[1:]:
        # Categories are Adult's published attribute values (documented with the data set).
        spec.append(
            {
                "name": c,
                "type": "categorical",
                "categories": sorted(frame[c].dropna().unique().tolist()),
                "unknown": "other" if c in MISSING_ALLOWED else "reject",
            }
        )
    schema = Schema.from_dict({"columns": spec})
    codes = schema.encode(frame, columns)
    WORK.mkdir(exist_ok=True)
    path = WORK / f"{dataset}.npy"
    np.save(path, codes)
    return path, list(schema.domain_shape(columns))


def tvd(synthetic: np.ndarray, true: np.ndarray, shape: list[int], k: int) -> float:
    out = []
    for attrs in itertools.combinations(range(len(shape)), k):
        dims = [shape[a] for a in attrs]
        cells = int(np.prod(dims))

        def freq(codes, attrs=attrs, dims=dims, cells=cells):
            flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
            return np.bincount(flat, minlength=cells) / len(codes)

        out.append(0.5 * np.abs(freq(synthetic) - freq(true)).sum())
    return float(np.mean(out))


def run_worker(method, codes_path, shape, eps, seed, timeout):
    """One run in a subprocess: (seconds, peak MB, synthetic codes) or None on failure."""
    python = PEER_PYTHON.get(method, sys.executable)
    out = WORK / f"syn-{method}-{codes_path.stem}-{eps}-{seed}.npy"
    args = [
        python,
        __file__,
        "--worker",
        method,
        "--codes",
        str(codes_path),
        "--shape",
        json.dumps(shape),
        "--epsilon",
        str(eps),
        "--seed",
        str(seed),
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"timeout after {timeout} s"
    if proc.returncode != 0:
        return None, (stderr.strip().splitlines() or ["failed"])[-1][:120]
    result = json.loads(stdout.strip().splitlines()[-1])
    return (result["seconds"], result["peak_mb"], np.load(out)), ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="ours,independent,aim,snsynth,mwem_pgm")
    parser.add_argument("--datasets", default="adult4,adult8")
    parser.add_argument("--eps", default="0.1,1,10")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--worker")
    parser.add_argument("--codes")
    parser.add_argument("--shape")
    parser.add_argument("--epsilon", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    print(
        f"{'data':7} {'cells':>9} {'eps':>5} {'method':12} {'time s':>8} {'peak MB':>8} "
        f"{'2-way TVD':>10} {'3-way TVD':>10}  runs / note"
    )
    for dataset in args.datasets.split(","):
        codes_path, shape = prepare(dataset)
        true = np.load(codes_path)
        for eps in (float(e) for e in args.eps.split(",")):
            for method in args.methods.split(","):
                report(dataset, shape, true, codes_path, method, eps, args)


def report(dataset, shape, true, codes_path, method, eps, args):
    rows, note = [], ""
    for seed in range(args.seeds):
        run, note = run_worker(method, codes_path, shape, eps, seed, args.timeout)
        if run is None:
            break
        seconds, peak, synthetic = run
        rows.append((seconds, peak, tvd(synthetic, true, shape, 2), tvd(synthetic, true, shape, 3)))
    cells = int(np.prod(shape))
    if not rows:
        print(
            f"{dataset:7} {cells:>9} {eps:>5g} {method:12} {'-':>8} {'-':>8} {'-':>10} "
            f"{'-':>10}  0 / {note}",
            flush=True,
        )
        return
    t, m, t2, t3 = np.mean(rows, axis=0)
    peak = max(r[1] for r in rows)
    print(
        f"{dataset:7} {cells:>9} {eps:>5g} {method:12} {t:>8.2f} {peak:>8.0f} {t2:>10.4f} "
        f"{t3:>10.4f}  {len(rows)} {note}",
        flush=True,
    )


# --- workers (each runs in its method's own environment) ---------------------------------------


LIBRARIES = {
    "ours": ["mechanisms.mwem"],
    "independent": ["mechanisms.mwem"],
    "aim": ["opendp.prelude", "polars", "mbi"],
    "snsynth": ["snsynth", "pandas"],
    "mwem_pgm": ["mbi", "jax"],
}


def worker(args) -> None:
    import resource

    sys.path.insert(0, str(REPO))
    codes = np.load(args.codes)
    shape = json.loads(args.shape)
    fit = {
        "ours": fit_ours,
        "independent": fit_independent,
        "aim": fit_aim,
        "snsynth": fit_snsynth,
        "mwem_pgm": fit_mwem_pgm,
    }[args.worker]
    for module in LIBRARIES[args.worker]:  # imported before the clock starts
        importlib.import_module(module)
    start = time.perf_counter()
    synthetic = fit(codes, shape, args.epsilon, args.seed)
    seconds = time.perf_counter() - start
    np.save(args.out, np.asarray(synthetic, dtype=np.int64))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb}))


def fit_ours(codes, shape, eps, seed):
    from mechanisms.mwem import mwem
    from mechanisms.noise import seeded_source
    from mechanisms.workload import expand_workload

    columns = [f"c{i}" for i in range(len(shape))]
    spec = {"queries": [{"type": "marginals", "k": 2}, {"type": "marginals", "k": 3}]}
    workload = expand_workload(spec, columns, tuple(shape), set())
    rng = seeded_source(seed)
    result = mwem(codes, tuple(shape), workload, epsilon=eps, rng=rng)
    return result.distribution.sample(len(codes), rng)


def fit_independent(codes, shape, eps, seed):
    from mechanisms.mwem import FactoredDistribution
    from mechanisms.noise import seeded_source

    rng = seeded_source(seed)
    scale = 2 * len(shape) / eps  # replace-one: each 1-way marginal has L1 sensitivity 2
    noisy = [
        np.bincount(codes[:, a], minlength=k) + rng.discrete_laplace(scale, size=k)
        for a, k in enumerate(shape)
    ]
    model = FactoredDistribution.independent([np.maximum(m, 0) + 1e-9 for m in noisy])
    return model.sample(len(codes), rng)


def zcdp_rho(eps: float, delta: float = PEER_DELTA) -> float:
    """The largest ρ whose zCDP guarantee implies (ε, δ)-DP: ρ + 2√(ρ ln 1/δ) = ε."""
    log_term = np.log(1 / delta)
    return float((np.sqrt(log_term + eps) - np.sqrt(log_term)) ** 2)


def fit_aim(codes, shape, eps, seed):
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    columns = [f"c{i}" for i in range(len(shape))]
    frame = pl.DataFrame({c: codes[:, i] for i, c in enumerate(columns)})
    rho = zcdp_rho(eps)
    context = dp.Context.compositor(
        data=frame.lazy(),
        privacy_unit=dp.unit_of(contributions=2),
        privacy_loss=dp.loss_of(rho=rho),
        split_evenly_over=1,
    )
    keys = {c: list(range(k)) for c, k in zip(columns, shape, strict=True)}
    table = (
        context.query()
        .select(columns)
        .contingency_table(keys=keys, algorithm=dp.mbi.AIM())
        .release()
    )
    synthetic = table.synthesize(rows=len(codes))
    # AIM's keys include a null category; rows it puts there match no real cell: count them
    # as wrong by mapping them to code 0 (reported on stderr).
    nulls = sum(synthetic[c].null_count() for c in columns)
    print(f"aim: {nulls} null values in the synthetic data mapped to 0", file=sys.stderr)
    return np.stack([synthetic[c].fill_null(0).to_numpy() for c in columns], axis=1)


def fit_snsynth(codes, shape, eps, seed):
    import random

    import pandas as pd
    from snsynth import Synthesizer

    random.seed(seed)
    np.random.seed(seed)
    frame = pd.DataFrame(codes, columns=[f"c{i}" for i in range(len(shape))])
    options = {"split_factor": 3} if np.prod(shape) > 1e5 else {}
    synth = Synthesizer.create("mwem", epsilon=eps, verbose=False, **options)
    synth.fit(frame, categorical_columns=list(frame.columns), preprocessor_eps=0.0)
    return synth.sample(len(codes)).to_numpy()


def fit_mwem_pgm(codes, shape, eps, seed, iters=100):
    """MWEM with private-pgm estimation (McKenna et al.'s MWEM+PGM), written here on mbi 2.x.

    zCDP at ρ = zcdp_rho(ε), T = 2d rounds, each: exponential mechanism (10% of ρ/T, L1-error score of
    sensitivity 2 under replace-one) over all 2-/3-way marginals, then the marginal with
    Gaussian noise (90%, L2 sensitivity √2), then mirror descent warm-started (`iters` steps).
    """
    import jax
    from mbi import Dataset, Domain, LinearMeasurement
    from mbi.estimation import MirrorDescent

    jax.config.update("jax_enable_x64", True)
    gen = np.random.default_rng(seed)
    names = [f"c{i}" for i in range(len(shape))]
    domain = Domain(names, shape)
    data = Dataset({c: codes[:, i] for i, c in enumerate(names)}, domain)
    cliques = [c for k in (2, 3) for c in itertools.combinations(names, k)]
    rounds, rho, n = 2 * len(shape), zcdp_rho(eps), len(codes)
    eps_select = np.sqrt(8 * 0.1 * rho / rounds)
    sigma = np.sqrt(rounds / (0.9 * rho))
    measurements, model = [], None
    for _ in range(rounds):
        errors = []
        for clique in cliques:
            true = data.project(clique).datavector()
            guess = (
                model.project(clique).datavector()
                if model is not None
                else np.full(true.size, n / true.size)
            )
            errors.append(np.abs(true - guess).sum())
        scores = eps_select * np.array(errors) / (2 * 2)
        pick = cliques[int(np.argmax(scores + gen.gumbel(size=len(scores))))]
        noisy = data.project(pick).datavector() + gen.normal(
            0, sigma, size=int(np.prod(domain.project(pick).shape))
        )
        measurements.append(LinearMeasurement(noisy, pick, stddev=sigma))
        model = MirrorDescent().estimate(
            domain, measurements, known_total=n, iters=iters, warm_start=model
        )
    synthetic = model.synthetic_data(n).to_dict()
    return np.stack([np.asarray(synthetic[c]) for c in names], axis=1)


if __name__ == "__main__":
    main()
