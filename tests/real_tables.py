"""Public tables with missing values, whole numbers and dates, read from installed packages.

Sources (package-bundled, read at test time, nothing downloaded; see tests/data/README.md):

- ``cars``: vega_datasets' local ``cars.json`` (the UCI Auto MPG data, Quinlan 1993): 406 cars;
  8 missing miles per gallon, 6 missing horsepower; whole-number cylinders and weights; the
  model year as a date.
- ``la_riots``: vega_datasets' local ``la-riots.csv`` (Los Angeles Times, deaths during the
  1992 riots): 63 rows; one missing age; the date of death.
- ``seattle_weather``: vega_datasets' local ``seattle-weather.csv`` (NOAA daily weather,
  2012-2015): 1,461 days, a date per day.
- ``co2``: statsmodels' ``co2`` (weekly Mauna Loa CO2, 1958-2001): 2,284 weeks, 59 missing.

Each comes as CSV text (dates written as ISO 8601 text, missing values as empty fields) and a
schema whose bounds and categories are public knowledge (physical ranges, model years, the
riots' dates, the listed origins), never read off the data.
"""

from __future__ import annotations

import io

import pandas as pd


def _csv(frame: pd.DataFrame) -> bytes:
    out = io.StringIO()
    frame.to_csv(out, index=False, date_format="%Y-%m-%d")
    return out.getvalue().encode()


def cars() -> tuple[bytes, dict]:
    from vega_datasets import local_data

    frame = local_data.cars()
    schema = {
        "columns": [
            {"name": "Name", "type": "ignored"},
            {"name": "Miles_per_Gallon", "type": "numeric", "lower": 0, "upper": 60, "bins": 12},
            {"name": "Cylinders", "type": "numeric", "lower": 3, "upper": 12, "integer": True},
            {"name": "Displacement", "type": "ignored"},
            {
                "name": "Horsepower",
                "type": "numeric",
                "lower": 0,
                "upper": 300,
                "integer": True,
                "bins": 10,
            },
            {
                "name": "Weight_in_lbs",
                "type": "numeric",
                "lower": 1000,
                "upper": 6000,
                "integer": True,
            },
            {
                "name": "Acceleration",
                "type": "numeric",
                "lower": 0,
                "upper": 30,
                "bins": 6,
                "decimals": 1,
            },
            {"name": "Year", "type": "date", "part": "year", "lower": 1970, "upper": 1982},
            {"name": "Origin", "type": "categorical", "categories": ["Europe", "Japan", "USA"]},
        ]
    }
    return _csv(frame), schema


def la_riots() -> tuple[bytes, dict]:
    from vega_datasets import local_data

    frame = local_data.la_riots()
    schema = {
        "columns": [
            {"name": "first_name", "type": "ignored"},
            {"name": "last_name", "type": "ignored"},
            {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "integer": True},
            {"name": "gender", "type": "categorical", "categories": ["Female", "Male"]},
            {
                "name": "race",
                "type": "categorical",
                "categories": ["Asian", "Black", "Latino", "White", "Other"],
            },
            {"name": "death_date", "type": "date", "part": "weekday"},
            {"name": "address", "type": "ignored"},
            {"name": "neighborhood", "type": "ignored"},
            {"name": "type", "type": "ignored"},
            {"name": "longitude", "type": "numeric", "lower": -119, "upper": -117.5, "bins": 6},
            {"name": "latitude", "type": "numeric", "lower": 33.5, "upper": 34.5, "bins": 4},
        ]
    }
    return _csv(frame), schema


def seattle_weather() -> tuple[bytes, dict]:
    from vega_datasets import local_data

    frame = local_data.seattle_weather()
    schema = {
        "columns": [
            {"name": "date", "type": "date", "part": "month"},
            {"name": "precipitation", "type": "numeric", "lower": 0, "upper": 60, "bins": 6},
            {"name": "temp_max", "type": "numeric", "lower": -10, "upper": 40, "bins": 10},
            {"name": "temp_min", "type": "numeric", "lower": -20, "upper": 30, "bins": 10},
            {"name": "wind", "type": "numeric", "lower": 0, "upper": 15, "bins": 5},
            {
                "name": "weather",
                "type": "categorical",
                "categories": ["drizzle", "fog", "rain", "snow", "sun"],
            },
        ]
    }
    return _csv(frame), schema


def co2() -> tuple[bytes, dict]:
    import statsmodels.api as sm

    frame = sm.datasets.co2.load_pandas().data.rename_axis("week").reset_index()
    schema = {
        "columns": [
            {
                "name": "week",
                "type": "date",
                "part": "date",
                "lower": "1955-01-01",
                "upper": "2004-12-31",
                "bins": 10,
            },
            {"name": "co2", "type": "numeric", "lower": 300, "upper": 400, "bins": 10},
        ]
    }
    return _csv(frame), schema


TABLES = {"cars": cars, "la_riots": la_riots, "seattle_weather": seattle_weather, "co2": co2}
