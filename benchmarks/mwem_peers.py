"""Our MWEM against public implementations on public tables: time, peak memory, 2-/3-way TVD.

    nice -n 10 .venv/bin/python benchmarks/mwem_peers.py [--methods ours,independent,aim]
        [--datasets tune|held-out|all|extra|anes96,...] [--eps 0.03,0.1,0.3,1,3,10] [--seeds 3]
        [--timeout 120] [--fresh ours] [--summary]

Tables (TABLES below; sources in their loaders): UCI Adult (adult4, adult8) and six tables never
used to develop MWEM's defaults before issue 16, split in half: defaults were tuned on the
"tune" half only (anes96, sftemps, fair); the "held-out" half (seattle, randhie, randhie1m) was
only run for the report. "all" is those six. A third group, "extra" (cars, airports, iris,
modechoice, seattle_temps, macrodata, star98, grunfeld, stocks, cancer: small n, skewed
marginals), was added on 2026-12-04 to check the release without rounds against the
independent one on tables of other shapes; run it with ``--methods ours,independent``.
Issue 44's held-out protocol (benchmarks/heldout.py, 30 tables, roles "h:tune" and
"h:held-out") runs with ``--datasets heldout:tune``, ``heldout:held-out`` or table names. Each
run's result is kept in benchmarks/results/mwem_peers.jsonl, in the
repository (keyed by method, table, ε, seed; with the date and processor), so that runs made in
several sessions add up; ``--fresh M`` reruns method M (e.g. ours after a code change). AIM's
time per run is capped at ``--timeout``: a run that exceeds it is recorded as "AIM > T s" and
the cell's later seeds are skipped, unless a later call gives a longer ``--timeout``. ``--summary`` prints, per (table, ε), our TVD over each
peer's (independent, AIM, MWEM+PGM), and whether the difference is inside the seed noise
(2 standard errors).
Issue 16's figures (docs/mwem.md, "Benchmark"), rerun of 2026-12-01 on a fresh machine (2 cores
shared, load 1-12, nice -n 19, one benchmark process at a time): ours and independent 3 seeds on
all six tables; AIM seed 0 (--timeout 300; randhie ε = 3 at 900) on fair, sftemps, seattle ε <=
3 and anes96 ε = .03, .1, 3 seeds on the cells within 10% (fair .3, sftemps .03, .1, anes96
.03); AIM did not finish fair ε = 3, 10 in 300 s nor randhie ε = 3 in 900 s; randhie ε = 10 and
randhie1m not run (AIM already > 900 s on randhie); MWEM+PGM seed 0 on sftemps only. The
previous run's AIM figures stand for seattle ε = 10, anes96 ε >= .3 and randhie ε <= 1.

Each peer run is its own subprocess, and so is each of our runs on a table of GROUP_ROWS rows
or more (below that a cell's seeds share one); a cell's peak memory is the maximum resident set
size of its runs (VmHWM of the worker's own process, records with "peak_from": "VmHWM"; it
includes the interpreter and the method's libraries). Earlier records took getrusage's
ru_maxrss, which Linux carries over from the driver at exec: they are at least the driver's
size, about 400 MB on the held-out tables. Peers run in their own
virtual environments (benchmarks/requirements-peers-*.txt), found at /tmp/peer-<name>/bin/python:

    python3.11 -m venv /tmp/peer-aim && /tmp/peer-aim/bin/pip install -r benchmarks/requirements-peers-aim.txt

Methods:
  ours          mechanisms.mwem, workload = all 2-way and 3-way marginals, defaults otherwise.
  ours_nocap    ours with every block of the model one whole table (quick_cells=None), no junction
                trees: the same selections and fit while memory allows, at more time and memory
                (before issue 44's junction trees: the speed cap of the selection lifted).
  ours3         ours on the 3-way marginals only (--marginals 3; TVD as for every method).
  independent   noisy 1-way marginals (all ε, discrete Laplace), rows from their product.
  aim           OpenDP's AIM (make_contingency_table, dp.mbi.AIM) at the zCDP ρ that implies
                (ε, 1e-9)-DP (a weaker guarantee than our pure ε-DP), privacy unit
                contributions=2 (a replaced row).
  aim_pure      aim at pure ε-DP (max divergence: Laplace noise, as ours): the issue's comparison.
  mst           OpenDP's MST (dp.mbi.MST: 1-way marginals and a spanning tree of 2-way ones), run as
                aim is (same relation, privacy unit and ρ); mst_pure at pure ε-DP, as aim_pure.
  (aim, mst: synthetic rows drawn i.i.d. from the fitted model, OpenDP's method "sample"; see
                fit_opendp for why not its default "round".)
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
import functools
import importlib
import itertools
import json
import math
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
    "aim_pure": "/tmp/peer-aim/bin/python",
    "mst": "/tmp/peer-aim/bin/python",
    "mst_pure": "/tmp/peer-aim/bin/python",
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
OPENDP_PEERS = ("aim", "aim_pure", "mst", "mst_pure")
OPENDP_SAMPLING = "sample"  # recorded with their runs (records without it: OpenDP's "round")
PEER_DELTA = 1e-9  # zCDP peers are run at the ρ that gives (ε, δ)-DP; ours is pure ε-DP
MISSING_ALLOWED = {"workclass", "occupation"}  # '?' in the source: the "(other)" cell


# --- tables -------------------------------------------------------------------------------------


def _bins(values, edges) -> np.ndarray:
    """Codes 0..len(edges) of ``values`` cut at the fixed, public ``edges`` (right-open)."""
    return np.digitize(np.asarray(values, dtype=float), edges)


def _statsmodels(name: str):
    import statsmodels.api as sm

    return getattr(sm.datasets, name).load_pandas().data


def load_anes96():
    """statsmodels ``anes96``: 944 rows of the 1996 American National Election Study (public
    domain). Party ID, left-right placements and vote are strongly correlated."""
    d = _statsmodels("anes96")
    columns = [
        d["TVnews"].astype(int),  # 0..7
        d["selfLR"].astype(int) - 1,  # 1..7
        d["ClinLR"].astype(int) - 1,
        d["DoleLR"].astype(int) - 1,
        d["PID"].astype(int),  # 0..6
        _bins(d["age"], [30, 40, 50, 60, 70]),
        d["educ"].astype(int) - 1,  # 1..7
        _bins(d["income"], [8, 12, 16, 19, 22]),  # 24 income brackets in 6 groups
        d["vote"].astype(int),
    ]
    return np.stack(columns, axis=1), [8, 7, 7, 7, 7, 6, 7, 6, 2]


def _vega_path(name: str) -> str:
    import os

    import vega_datasets

    return os.path.join(os.path.dirname(vega_datasets.__file__), "_data", name)


def _vega(name: str):
    import pandas as pd

    return pd.read_csv(_vega_path(name))


def load_sftemps():
    """vega_datasets local ``sf-temps.csv``: 8,759 hourly San Francisco temperatures of 2010
    (BSD-3-Clause package; NOAA data). Month, 3-hour block, weekday and temperature (°F)."""
    import pandas as pd

    d = _vega("sf-temps.csv")
    date = pd.to_datetime(d["date"])
    columns = [
        date.dt.month.to_numpy() - 1,
        date.dt.hour.to_numpy() // 3,
        _bins(d["temp"], [45, 48, 51, 54, 57, 60, 63, 66, 70]),
    ]
    return np.stack(columns, axis=1), [12, 8, 10]


def load_fair():
    """statsmodels ``fair``: 6,366 rows of Fair's 1974 Redbook survey on affairs (public
    domain). Mostly weak correlations, except age, years married and children."""
    d = _statsmodels("fair")
    columns = [
        d["rate_marriage"].astype(int) - 1,  # 1..5
        _bins(d["age"], [20, 25, 30, 35, 40]),  # 17.5, 22, ..., 42
        _bins(d["yrs_married"], [1, 2.6, 7, 10, 14, 20]),  # 0.5, 2.5, 6, 9, 13, 16.5, 23
        _bins(d["children"], [0.5, 1.5, 2.5, 3.5, 4.5]),  # 0..5.5
        d["religious"].astype(int) - 1,  # 1..4
        _bins(d["educ"], [10, 13, 15, 16.5, 18]),  # 9, 12, 14, 16, 17, 20
        d["occupation"].astype(int) - 1,  # 1..6
        d["occupation_husb"].astype(int) - 1,
        _bins(d["affairs"], [1e-9]),  # any affair
    ]
    return np.stack(columns, axis=1), [5, 6, 7, 6, 4, 6, 6, 6, 2]


def load_seattle():
    """vega_datasets local ``seattle-weather.csv``: 1,461 days of Seattle weather 2012-2015
    (BSD-3-Clause package; NOAA data). Month, precipitation, max/min temperature, wind, weather:
    strong correlations (season, the two temperatures, rain and weather)."""
    import pandas as pd

    d = _vega("seattle-weather.csv")
    weather = ["drizzle", "fog", "rain", "snow", "sun"]
    columns = [
        pd.to_datetime(d["date"]).dt.month.to_numpy() - 1,
        _bins(d["precipitation"], [0.1, 1, 3, 8, 15]),
        _bins(d["temp_max"], [5, 10, 13, 16, 20, 24, 28]),
        _bins(d["temp_min"], [0, 3, 5, 7, 9, 11, 13]),
        _bins(d["wind"], [1.5, 2.5, 3.5, 4.5, 6]),
        d["weather"].map(weather.index).to_numpy(),
    ]
    return np.stack(columns, axis=1), [12, 6, 8, 8, 6, 5]


RANDHIE_EDGES = {  # the coarse bins; randhie1m cuts the continuous columns finer
    "mdvis": [1, 2, 3, 5, 8, 13, 20],
    "lncoins": [1, 2.9, 3.5, 4.3],  # 5 coinsurance plans
    "idp": [0.5],
    "lpi": [1, 3, 4, 5, 5.5, 6, 6.5, 7],
    "fmde": [1, 4, 5, 6, 6.5, 7, 7.5, 8],
    "physlm": [0.01, 0.3, 0.6],
    "disea": [5, 8, 10, 12, 14, 17, 21, 27, 35],
    "hlthg": [0.5],
    "hlthf": [0.5],
    "hlthp": [0.5],
}
RANDHIE_FINE = {
    "mdvis": [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 17, 20, 25, 35],
    "lpi": [0.5, 1, 2, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.25, 6.5, 6.75, 7, 7.1],
    "fmde": [0.5, 1, 2, 3, 4, 5, 5.5, 6, 6.5, 7, 7.25, 7.5, 7.75, 8, 8.2],
    "physlm": [0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95],
    "disea": [3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 19, 21, 24, 27, 31, 40],
}


def _randhie(edges):
    d = _statsmodels("randhie")
    columns = [_bins(d[c], e) for c, e in edges.items()]
    return np.stack(columns, axis=1), [len(e) + 1 for e in edges.values()]


def load_randhie():
    """statsmodels ``randhie``: 20,190 rows of the RAND Health Insurance Experiment (public
    domain). Doctor visits, coinsurance, income, health measures: mostly weak correlations."""
    return _randhie(RANDHIE_EDGES)


def load_randhie1m():
    """Generated: 10^6 rows drawn with replacement (numpy default_rng(2026)) from statsmodels'
    ``randhie``, its continuous columns cut finer (RANDHIE_FINE): about 7×10^7 cells."""
    codes, shape = _randhie({**RANDHIE_EDGES, **RANDHIE_FINE})
    rows = np.random.default_rng(2026).integers(len(codes), size=1_000_000)
    return codes[rows], shape


def _equal_width(values, k: int = 6) -> tuple[np.ndarray, int]:
    """Codes of ``k`` equal-width bins over the column's range (a stand-in for the range a
    custodian declares; these tables are only compared with the independent release)."""
    v = np.asarray(values, dtype=float)
    lo, hi = np.nanmin(v), np.nanmax(v)
    codes = np.floor((v - lo) / ((hi - lo) or 1.0) * k).clip(0, k - 1)  # a constant: bin 0
    return np.nan_to_num(codes, nan=0).astype(np.int64), k


def _categories(values) -> tuple[np.ndarray, int]:
    """Codes of the column's categories, a missing value its own category."""
    import pandas as pd

    codes, names = pd.factorize(pd.Series(values).astype(object).fillna("(missing)").astype(str))
    return codes, len(names)


def _table(columns) -> tuple[np.ndarray, list[int]]:
    codes, shape = zip(*columns, strict=True)
    return np.stack(codes, axis=1).astype(np.int64), list(shape)


def load_cars():
    """vega_datasets ``cars.json``: 406 cars of 1970-1982 (BSD-3-Clause package; StatLib)."""
    import pandas as pd

    d = pd.read_json(_vega_path("cars.json"))
    measures = ["Miles_per_Gallon", "Horsepower", "Weight_in_lbs", "Acceleration"]
    return _table(
        [_categories(d["Cylinders"]), _categories(d["Origin"])]
        + [_equal_width(d[c]) for c in measures]
        + [_categories(pd.to_datetime(d["Year"]).dt.year)]
    )


def load_airports():
    """vega_datasets ``airports.csv``: 3,376 US airports (BSD-3-Clause package; FAA data).
    State has 57 categories, most of them small: a skewed marginal."""
    import pandas as pd

    d = pd.read_csv(_vega_path("airports.csv"))
    return _table(
        [
            _categories(d["state"]),
            _equal_width(d["latitude"], 8),
            _equal_width(d["longitude"], 8),
            _categories(d["country"]),
        ]
    )


def load_iris():
    """vega_datasets ``iris.json``: Fisher's 150 irises (BSD-3-Clause package)."""
    import pandas as pd

    d = pd.read_json(_vega_path("iris.json"))
    sizes = ["sepalLength", "sepalWidth", "petalLength", "petalWidth"]
    return _table([_equal_width(d[c], 5) for c in sizes] + [_categories(d["species"])])


def load_modechoice():
    """statsmodels ``modechoice``: 840 rows of travel-mode choices (public domain)."""
    d = _statsmodels("modechoice")
    measures = ["ttme", "invc", "invt", "hinc"]
    return _table(
        [_categories(d["mode"]), _categories(d["choice"])]
        + [_equal_width(d[c]) for c in measures]
        + [_categories(d["psize"])]
    )


def load_seattle_temps():
    """vega_datasets ``seattle-temps.csv``: 8,759 hourly Seattle temperatures of 2010
    (BSD-3-Clause package; NOAA data). Month, 3-hour block, weekday, temperature."""
    import pandas as pd

    d = pd.read_csv(_vega_path("seattle-temps.csv"))
    t = pd.to_datetime(d["date"])
    return _table(
        [
            (t.dt.month.to_numpy() - 1, 12),
            (t.dt.hour.to_numpy() // 3, 8),
            (t.dt.day_of_week.to_numpy(), 7),
            _equal_width(d["temp"], 10),
        ]
    )


def load_macrodata():
    """statsmodels ``macrodata``: 203 quarters of US macroeconomic series (public domain)."""
    d = _statsmodels("macrodata")
    series = ["realgdp", "realcons", "realinv", "cpi", "unemp", "infl", "realint"]
    return _table([_categories(d["quarter"])] + [_equal_width(d[c], 5) for c in series])


def load_star98():
    """statsmodels ``star98``: 303 California school districts (public domain). Most
    columns are shares with long tails: equal-width bins leave 80-97% in one bin."""
    d = _statsmodels("star98")
    shares = ["NABOVE", "LOWINC", "PERASIAN", "PERBLACK", "PERHISP", "PERMINTE"]
    return _table([_equal_width(d[c], 5) for c in [*shares, "AVYRSEXP", "PCTCHRT"]])


def load_grunfeld():
    """statsmodels ``grunfeld``: 220 firm-years of investment data (public domain)."""
    d = _statsmodels("grunfeld")
    return _table(
        [_categories(d["firm"]), _equal_width(d["year"], 4)]
        + [_equal_width(d[c]) for c in ("invest", "value", "capital")]
    )


def load_stocks():
    """vega_datasets ``stocks.csv``: 560 monthly prices of five stocks (BSD-3-Clause)."""
    import pandas as pd

    d = pd.read_csv(_vega_path("stocks.csv"))
    year = pd.to_datetime(d["date"], format="%b %d %Y").dt.year
    return _table(
        [_categories(d["symbol"]), _categories(year), _equal_width(np.log(d["price"]), 8)]
    )


def load_cancer():
    """statsmodels ``cancer``: 301 US counties' breast-cancer deaths and population (public
    domain). Three skewed columns: deaths, log population, deaths per person."""
    d = _statsmodels("cancer")
    rate = d["cancer"] / d["population"]
    return _table(
        [_equal_width(d["cancer"]), _equal_width(np.log(d["population"])), _equal_width(rate)]
    )


TABLES = {  # name: (loader, role)
    "anes96": (load_anes96, "tune"),
    "sftemps": (load_sftemps, "tune"),
    "fair": (load_fair, "tune"),
    "seattle": (load_seattle, "held-out"),
    "randhie": (load_randhie, "held-out"),
    "randhie1m": (load_randhie1m, "held-out"),
    # extra: added after the defaults were final, to check the release without rounds against
    # the independent one on tables of other shapes (small n, skewed marginals); not in "all"
    "cars": (load_cars, "extra"),
    "airports": (load_airports, "extra"),
    "iris": (load_iris, "extra"),
    "modechoice": (load_modechoice, "extra"),
    "seattle_temps": (load_seattle_temps, "extra"),
    "macrodata": (load_macrodata, "extra"),
    "star98": (load_star98, "extra"),
    "grunfeld": (load_grunfeld, "extra"),
    "stocks": (load_stocks, "extra"),
    "cancer": (load_cancer, "extra"),
}


ROLES = ("tune", "held-out", "extra")


def heldout():
    """benchmarks/heldout.py, the held-out protocol of issue 44 (its tables: --datasets
    heldout:tune, heldout:held-out or their names)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import heldout as protocol

    return protocol


def role_of(table: str) -> str:
    if table in TABLES:
        return TABLES[table][1]
    return "h:" + heldout().role(table) if table in heldout().TABLES else "adult"


# --- driver -------------------------------------------------------------------------------------


def prepare(dataset: str) -> tuple[Path, list[int]]:
    """Encode a table's columns (fixed public bins); save the codes for the workers."""
    WORK.mkdir(exist_ok=True)
    path = WORK / f"{dataset}.npy"
    if dataset in heldout().TABLES:
        frame, schema = heldout().load(dataset)
        from mechanisms.mwem.structural import structural_cells

        columns = schema.resolve_columns()
        structural_path(path).write_text(json.dumps(structural_cells(schema, columns)))
    if dataset in TABLES or dataset in heldout().TABLES:
        codes, shape = TABLES[dataset][0]() if dataset in TABLES else heldout().encode(dataset)
        assert all(0 <= codes[:, a].min() and codes[:, a].max() < k for a, k in enumerate(shape))
        np.save(path, np.ascontiguousarray(codes, dtype=np.int64))
        return path, shape
    return prepare_adult(dataset, path)


def structural_path(codes_path: Path) -> Path:
    """Beside a held-out table's codes: its "(missing)"/"(other)" cells per column, for ours
    to apply the release's rule (mechanisms.mwem.structural) as the portal does."""
    return codes_path.with_suffix(".structural.json")


def prepare_adult(dataset: str, path: Path) -> tuple[Path, list[int]]:
    """Encode Adult's columns through a public schema."""
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
    np.save(path, codes)
    return path, list(schema.domain_shape(columns))


def tvd(synthetic: np.ndarray, true: np.ndarray, shape: list[int], k: int) -> float:
    """Mean over every k-way marginal of ½‖p_synthetic − p_true‖₁ (numpy only, no project code)."""
    out = []
    for attrs in itertools.combinations(range(len(shape)), k):
        dims = [shape[a] for a in attrs]
        cells = int(np.prod(dims))

        def freq(codes, attrs=attrs, dims=dims, cells=cells):
            flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
            return np.bincount(flat, minlength=cells) / len(codes)

        out.append(0.5 * np.abs(freq(synthetic) - freq(true)).sum())
    return float(np.mean(out))


def run_worker(method, codes_path, shape, eps, seeds, timeout):
    """Runs of ``seeds`` in one subprocess: [(seed, (times, peak MB, synthetic) or None, note)]
    (times: wall "seconds" and process "cpu_seconds").

    ``timeout`` is per run (the subprocess gets len(seeds) × timeout); the runs finished before
    a timeout or failure are kept. Peak memory is the subprocess's maximum resident set size
    after each run, so a cell's peak (the maximum over its seeds) is the same as with one
    subprocess per run.
    """
    python = PEER_PYTHON.get(method, sys.executable)
    out = WORK / f"syn-{method}-{codes_path.stem}-{eps}-{{seed}}.npy"
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
        ",".join(str(seed) for seed in seeds),
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout * len(seeds))
        # the error's last line that says something (OpenDP ends its message with a bare '")')
        said = [row.strip() for row in stderr.splitlines() if len(row.strip()) > 3]
        note = "" if proc.returncode == 0 else (said or ["failed"])[-1][:120]
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
        note = f"timeout > {timeout:g} s"
    done = {}
    for row in stdout.strip().splitlines():
        if row.startswith("{"):
            result = json.loads(row)
            path = Path(str(out).format(seed=result["seed"]))
            timing = {k: result[k] for k in ("seconds", "cpu_seconds") if k in result}
            done[result["seed"]] = (timing, result["peak_mb"], np.load(path))
    runs = [(seed, done[seed], "") for seed in seeds if seed in done]
    missing = [seed for seed in seeds if seed not in done]
    return runs + ([(missing[0], None, note or "failed")] if missing else [])


# Kept in the repository, so that runs made in different sessions (AIM's take hours) add up; each
# record says when it was made and on what processor (a speed-up compares runs of one machine).
RESULTS = REPO / "benchmarks" / "results" / "mwem_peers.jsonl"
GROUP_ROWS = 100_000


def processor() -> str:
    """The machine's processor model and core count, as /proc/cpuinfo names them."""
    names = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    return f"{names[0] if names else 'unknown'} x{len(names)}"


def cached() -> dict[tuple, dict]:
    """Every recorded run, the latest per (method, table, ε, seed)."""
    runs = {}
    if RESULTS.exists():
        for line in RESULTS.read_text().splitlines():
            r = json.loads(line)
            runs[(r["method"], r["table"], r["eps"], r["seed"])] = r
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="ours,independent,aim")
    parser.add_argument("--datasets", default="all")
    parser.add_argument("--eps", default="0.03,0.1,0.3,1,3,10")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--fresh", default="", help="methods to rerun despite cached results")
    parser.add_argument("--summary", action="store_true", help="print the cached results only")
    parser.add_argument("--worker")
    parser.add_argument("--codes")
    parser.add_argument("--shape")
    parser.add_argument("--epsilon", type=float)
    parser.add_argument("--seed", help="the worker's seeds, comma-separated")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    tables = {
        "all": [t for t, (_, role) in TABLES.items() if role != "extra"],
        **{r: [t for t, (_, role) in TABLES.items() if role == r] for r in ROLES},
        **{f"heldout:{r}": heldout().names(r) for r in ("tune", "held-out")},
    }.get(args.datasets, args.datasets.split(","))
    eps_grid = [float(e) for e in args.eps.split(",")]
    methods = args.methods.split(",")
    if not args.summary:
        fresh = set(args.fresh.split(","))
        for table in tables:
            codes_path, shape = prepare(table)
            true = np.load(codes_path)
            for eps in eps_grid:
                for method in methods:
                    run_cell(table, shape, true, codes_path, method, eps, args, fresh)
    summary(tables, eps_grid, methods, args.seeds)


def run_cell(table, shape, true, codes_path, method, eps, args, fresh):
    """Run (or reuse) the seeds of one (table, ε, method) cell; append each to RESULTS.

    On tables below GROUP_ROWS rows our methods run the cell's seeds in one subprocess (the
    interpreter's start dominates there); a peer, or any method on a larger table, one
    subprocess per seed (a peer's time cap is per run; a large run's peak memory its own).
    """
    runs = cached()
    todo = []
    for seed in range(args.seeds):
        old = runs.get((method, table, eps, seed))
        if old is not None and method not in fresh:
            if old.get("note") and old.get("timeout_s", math.inf) >= args.timeout:
                return  # a timeout or failure ends the cell, as when it was run
            if not old.get("note"):
                continue
        todo.append(seed)
    grouped = method not in PEER_PYTHON and len(true) < GROUP_ROWS
    groups = [todo] if grouped else [[seed] for seed in todo]
    for group in filter(None, groups):
        for seed, run, note in run_worker(method, codes_path, shape, eps, group, args.timeout):
            record = {"method": method, "table": table, "eps": eps, "seed": seed, "note": note}
            record.update(date=time.strftime("%Y-%m-%d"), cpu=processor())
            if note.startswith("timeout"):
                record["timeout_s"] = args.timeout
            if method in OPENDP_PEERS:
                record["opendp_sampling"] = OPENDP_SAMPLING
            if run is not None:
                timing, peak, synthetic = run
                record.update(
                    **timing,
                    peak_mb=peak,
                    peak_from="VmHWM",
                    tvd2=tvd(synthetic, true, shape, 2),
                    tvd3=tvd(synthetic, true, shape, 3),
                )
            RESULTS.parent.mkdir(exist_ok=True)
            with RESULTS.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(json.dumps(record), file=sys.stderr, flush=True)
            if run is None:
                return


def summary(tables, eps_grid, methods, seeds):
    """Per cell: each method's mean time, peak MB, TVD2/TVD3; then ours over the best peer."""
    runs = cached()
    print(
        f"{'table':10} {'role':8} {'n':>8} {'cells':>8} {'eps':>5} {'method':12} {'time s':>8} "
        f"{'peak MB':>8} {'2-way TVD':>10} {'3-way TVD':>10}  runs / note"
    )
    ratios = []
    for table in tables:
        role = role_of(table)
        path = WORK / f"{table}.npy"
        if not path.exists():
            continue
        codes = np.load(path, mmap_mode="r")
        for eps in eps_grid:
            cell = {}
            for method in methods:
                rows = [runs[k] for s in range(seeds) if (k := (method, table, eps, s)) in runs]
                done = [r for r in rows if not r.get("note")]
                note = next((r["note"] for r in rows if r.get("note")), "")
                cell[method] = (done, note)
                print(line(table, role, codes, eps, method, done, note), flush=True)
            ratios.append((table, role, eps, compare(cell)))
    print_ratios(ratios)


def _cells(table, codes) -> str:
    if table in TABLES:
        shape = TABLES[table][0]()[1]
    elif table in heldout().TABLES:
        frame, schema = heldout().load(table)
        shape = list(schema.domain_shape(schema.resolve_columns()))
    else:
        shape = [codes[:, a].max() + 1 for a in range(codes.shape[1])]
    return f"{float(np.prod(np.asarray(shape, dtype=float))):.0e}"


def line(table, role, codes, eps, method, done, note) -> str:
    head = f"{table:10} {role:8} {len(codes):>8} {_cells(table, codes):>8} {eps:>5g} {method:12}"
    if not done:
        return f"{head} {'-':>8} {'-':>8} {'-':>10} {'-':>10}  0 / {note or 'not run'}"
    t = np.mean([r["seconds"] for r in done])
    peak = max(r["peak_mb"] for r in done)
    t2 = np.mean([r["tvd2"] for r in done])
    t3 = np.mean([r["tvd3"] for r in done])
    cpu = [r["cpu_seconds"] for r in done if "cpu_seconds" in r]
    cpu_text = f" CPU {np.mean(cpu):.2f} s" if cpu else ""
    return f"{head} {t:>8.2f} {peak:>8.0f} {t2:>10.4f} {t3:>10.4f}  {len(done)} {note}{cpu_text}"


def _mean_se(done, key):
    values = np.array([r[key] for r in done])
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return float(values.mean()), float(se)


def compare(cell):
    """Ours over each peer (TVD2, TVD3 ratios), a flag when within 2 s.e., and the speed-up."""
    ours, _ = cell.get("ours", ([], ""))
    if not ours:
        return {}
    out = {}
    for peer, (done, note) in cell.items():
        if peer == "ours":
            continue
        entry = {}
        if done:
            for key in ("tvd2", "tvd3"):
                (a, sa), (b, sb) = _mean_se(ours, key), _mean_se(done, key)
                entry[key] = (a / b, abs(a - b) <= 2 * np.hypot(sa, sb))
        if peer in SPEED_PEERS:
            our_t = np.mean([r["seconds"] for r in ours])
            if done:
                entry["speedup"] = (np.mean([r["seconds"] for r in done]) / our_t, False)
            elif note.startswith("timeout"):
                entry["speedup"] = (float(note.split()[2]) / our_t, True)  # at least
            entry["note"] = note
        out[peer] = entry
    return out


RATIO_PEERS = {  # peer: column heading
    "ours_nocap": "nocap",  # ours with whole tables only, no junction trees (issue 44)
    "ours3": "3-way",  # ours on the 3-way marginals only (--marginals 3)
    "independent": "indep",
    "aim_pure": "AIMε",  # pure ε-DP, as ours: the comparison
    "aim": "AIMρ",  # zCDP at (ε, 1e-9)-DP: a weaker guarantee
    "mst_pure": "MSTε",
    "mst": "MSTρ",
    "mwem_pgm": "PGM",
}
SPEED_PEERS = ("aim_pure", "aim", "mst_pure", "mst")  # a speed-up column beside their TVDs


def print_ratios(ratios) -> None:
    """Ratio table: ours / each peer of RATIO_PEERS for TVD2 and TVD3 (~ inside the seed noise,
    ! worse outside it) and each AIM's speed-up."""
    print()
    print("ours / peer mean TVD (< 1: ours lower; '~' the gap is within 2 standard errors of the")
    print("seed means, '!' ours higher beyond the seed noise); speed-up = AIM time / ours")
    heads = [
        head
        for peer, h in RATIO_PEERS.items()
        for head in [f"{h} TVD2", f"{h} TVD3"] + ([f"{h} x"] if peer in SPEED_PEERS else [])
    ]
    print(f"{'table':10} {'role':8} {'eps':>5} " + " ".join(f"{h:>10}" for h in heads))

    def fmt(entry, key):
        if key not in entry:
            return "-"
        value, close = entry[key]
        mark = "~" if close else ("!" if value > 1 else " ")
        return f"{value:.2f}{mark}"

    def speed(entry):
        if "speedup" not in entry:
            return "-"
        value, at_least = entry["speedup"]
        return f"{'>' if at_least else ''}{value:.0f}x"

    for table, role, eps, entry in ratios:
        columns = []
        for peer in RATIO_PEERS:
            columns += [fmt(entry.get(peer, {}), "tvd2"), fmt(entry.get(peer, {}), "tvd3")]
            if peer in SPEED_PEERS:
                columns.append(speed(entry.get(peer, {})))
        print(f"{table:10} {role:8} {eps:>5g} " + " ".join(f"{c:>10}" for c in columns))
    print_totals(ratios)


def print_totals(ratios) -> None:
    """Per role, peer and TVD: the cells where ours is lower beyond the seed noise (won), within
    2 standard errors (tied) or higher beyond it (lost); a peer's cells without a result (a
    timeout, a failure) are counted apart, with their first note."""
    totals: dict[tuple, list] = {}
    for _, role, _, entry in ratios:
        for peer, found in entry.items():
            for key in ("tvd2", "tvd3"):
                counts = totals.setdefault((role, peer, key), [0, 0, 0, 0, ""])
                if key not in found:
                    counts[3] += 1
                    counts[4] = counts[4] or found.get("note", "")
                    continue
                value, close = found[key]
                counts[1 if close else (2 if value > 1 else 0)] += 1
    print()
    print("ours against each peer: cells won / tied / lost (tied: within 2 standard errors of the")
    print("seed means), and cells without the peer's result")
    for (role, peer, key), (won, tied, lost, missing, note) in sorted(totals.items()):
        without = f"{missing} ({note})" if note else str(missing)
        print(f"{role:10} {peer:12} {key.upper():5} {won:>3} / {tied:>3} / {lost:>3}   {without}")


# --- workers (each runs in its method's own environment) ---------------------------------------


LIBRARIES = {
    "ours": ["mechanisms.mwem"],
    "ours_nocap": ["mechanisms.mwem"],
    "ours3": ["mechanisms.mwem"],
    "independent": ["mechanisms.mwem"],
    "aim": ["opendp.prelude", "polars", "mbi"],
    "aim_pure": ["opendp.prelude", "polars", "mbi"],
    "mst": ["opendp.prelude", "polars", "mbi"],
    "mst_pure": ["opendp.prelude", "polars", "mbi"],
    "snsynth": ["snsynth", "pandas"],
    "mwem_pgm": ["mbi", "jax"],
}


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (VmHWM in /proc/self/status: the program's
    own memory, unlike getrusage's ru_maxrss, which keeps the parent's size across exec)."""
    status = Path("/proc/self/status").read_text()
    kilobytes = next(row.split()[1] for row in status.splitlines() if row.startswith("VmHWM:"))
    return int(kilobytes) / 1024


def worker(args) -> None:
    sys.path.insert(0, str(REPO))
    codes = np.load(args.codes)
    shape = json.loads(args.shape)
    fit = {
        "ours": fit_ours,
        "ours_nocap": fit_ours_nocap,
        "ours3": fit_ours3,
        "independent": fit_independent,
        "aim": fit_aim,
        "aim_pure": fit_aim_pure,
        "mst": fit_mst,
        "mst_pure": fit_mst_pure,
        "snsynth": fit_snsynth,
        "mwem_pgm": fit_mwem_pgm,
    }[args.worker]
    sidecar = structural_path(Path(args.codes))
    if args.worker.startswith("ours") and sidecar.exists():
        cells = {int(a): found for a, found in json.loads(sidecar.read_text()).items()}
        fit = functools.partial(fit, structural=cells)
    for module in LIBRARIES[args.worker]:  # imported before the clock starts
        importlib.import_module(module)
    for seed in (int(part) for part in args.seed.split(",")):
        start, cpu = time.perf_counter(), time.process_time()
        synthetic = fit(codes, shape, args.epsilon, seed)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        np.save(args.out.format(seed=seed), np.asarray(synthetic, dtype=np.int64))
        record = {"seed": seed, "seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak_rss_mb()}
        print(json.dumps(record), flush=True)


def fit_ours(codes, shape, eps, seed, structural=None, orders=(2, 3), **options):
    """Ours on all marginals of `orders`; with `structural` (a held-out table's "(missing)"/
    "(other)" cells) mwem applies the release's rule, as the portal does.
    `options` go to mwem as they are (quick_cells)."""
    from mechanisms.mwem import mwem
    from mechanisms.noise import seeded_source
    from mechanisms.workload import expand_workload

    columns = [f"c{i}" for i in range(len(shape))]
    spec = {"queries": [{"type": "marginals", "k": k} for k in orders]}
    workload = expand_workload(spec, columns, tuple(shape), set())
    rng = seeded_source(seed)
    result = mwem(
        codes, tuple(shape), workload, epsilon=eps, rng=rng, structural=structural, **options
    )
    return result.distribution.sample(len(codes), rng)


def fit_ours3(codes, shape, eps, seed, structural=None):
    """Ours on the 3-way marginals only (the command line's --marginals 3)."""
    return fit_ours(codes, shape, eps, seed, structural, orders=(3,))


def fit_ours_nocap(codes, shape, eps, seed, structural=None):
    """Ours with every block of the model one whole table (quick_cells=None: no junction
    trees), as the release's parameter quick_cells "none" does."""
    return fit_ours(codes, shape, eps, seed, structural, quick_cells=None)


def fit_independent(codes, shape, eps, seed):
    from mechanisms.accounting import noise_scale
    from mechanisms.mwem import FactoredDistribution
    from mechanisms.noise import seeded_source

    rng = seeded_source(seed)
    # replace-one: the d 1-way marginals together have L1 sensitivity 2d; the smallest float
    # scale >= 2d/ε, as MWEM's own start draws it
    scale = noise_scale(2 * len(shape), eps)
    noisy = [
        np.bincount(codes[:, a], minlength=k) + rng.discrete_laplace(scale, size=k)
        for a, k in enumerate(shape)
    ]
    # every count clipped at half a row: no cell impossible (MWEM's release without rounds)
    model = FactoredDistribution.independent([np.maximum(m, 0.5) for m in noisy])
    return model.sample(len(codes), rng)


def zcdp_rho(eps: float, delta: float = PEER_DELTA) -> float:
    """The largest ρ whose zCDP guarantee implies (ε, δ)-DP: ρ + 2√(ρ ln 1/δ) = ε."""
    log_term = np.log(1 / delta)
    return float((np.sqrt(log_term + eps) - np.sqrt(log_term)) ** 2)


def fit_aim(codes, shape, eps, seed, pure=False):
    """OpenDP's AIM on a replaced row (contributions=2): at the zCDP ρ giving (ε, 1e-9)-DP, or
    with ``pure`` at pure ε-DP (max divergence: Laplace noise, as ours), the issue's setting."""
    return fit_opendp("AIM", codes, shape, eps, pure)


def fit_aim_pure(codes, shape, eps, seed):
    return fit_aim(codes, shape, eps, seed, pure=True)


def fit_mst(codes, shape, eps, seed, pure=False):
    """OpenDP's MST, as fit_aim runs AIM (same relation, privacy unit and privacy loss)."""
    return fit_opendp("MST", codes, shape, eps, pure)


def fit_mst_pure(codes, shape, eps, seed):
    return fit_mst(codes, shape, eps, seed, pure=True)


def fit_opendp(algorithm, codes, shape, eps, pure):
    """OpenDP's contingency table with ``algorithm`` (a dp.mbi class name, defaults) on a
    replaced row (contributions=2), at pure ε-DP or the zCDP ρ = zcdp_rho(ε); OpenDP draws its
    own noise (no seed)."""
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    columns = [f"c{i}" for i in range(len(shape))]
    frame = pl.DataFrame({c: codes[:, i] for i, c in enumerate(columns)})
    context = dp.Context.compositor(
        data=frame.lazy(),
        privacy_unit=dp.unit_of(contributions=2),
        privacy_loss=dp.loss_of(epsilon=eps) if pure else dp.loss_of(rho=zcdp_rho(eps)),
        split_evenly_over=1,
    )
    keys = {c: list(range(k)) for c, k in zip(columns, shape, strict=True)}
    table = (
        context.query()
        .select(columns)
        .contingency_table(keys=keys, algorithm=getattr(dp.mbi, algorithm)())
        .release()
    )
    # i.i.d. rows from the fitted model, as ours draws them. OpenDP's default ("round", mbi
    # 1.1.0) gives each row of a group its value by the row's rank in the group, so columns that
    # share no clique come out correlated through the row order (flights, MST at ε 10: the
    # tree's 6 pairs at TVD .001-.007, the other 15 at .08-.49, where independent 1-way
    # marginals give .01-.15).
    synthetic = table.synthesize(rows=len(codes), method=OPENDP_SAMPLING)
    # OpenDP's keys include a null category; rows it puts there match no real cell: count them
    # as wrong by mapping them to code 0 (reported on stderr).
    nulls = sum(synthetic[c].null_count() for c in columns)
    print(f"{algorithm}: {nulls} null values in the synthetic data mapped to 0", file=sys.stderr)
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
