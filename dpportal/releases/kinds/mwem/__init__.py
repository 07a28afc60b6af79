"""MWEM in the portal (`mechanisms.mwem`): synthetic rows that keep the patterns between pairs
(or triples) of columns; its measurements and the rounds of its public trace on the results
page."""

import json
from typing import Any

from django import forms

from dpportal.core.form_fields import WHOLE_NUMBER_INPUT
from dpportal.releases import charts, comparisons, packaging
from dpportal.releases.accuracy_preview import interval_row, marginal_row
from dpportal.releases.kinds.synthetic import (
    SyntheticKind,
    relative_error_line,
    relative_error_warning,
)
from mechanisms import accuracy
from mechanisms import workload as mwem_workload
from mechanisms.mwem import expected_abs_noise

MEASUREMENTS = "measurements.json"


class Mwem(SyntheticKind):
    legend = "MWEM settings"

    def good_for(self) -> str:
        return (
            "A synthetic table over many columns that keeps the patterns between pairs (or "
            "triples) of columns. Best when you need realistic made-up rows."
        )

    def outputs(self) -> str:
        return (
            "synthetic.csv (made-up rows, as many as the table has) and measurements.json "
            "(what was measured, with noise)."
        )

    def form_fields(self) -> dict[str, forms.Field]:
        return {
            "mwem_marginal_size": forms.TypedChoiceField(
                label="Patterns to keep",
                coerce=int,
                initial=2,
                required=False,
                empty_value=2,  # type: ignore[arg-type]  # returned as is when empty
                choices=[
                    (1, "Each column on its own"),
                    (2, "Pairs of columns"),
                    (3, "Triples of columns"),
                ],
            ),
            "mwem_rounds": forms.IntegerField(
                label="MWEM rounds",
                required=False,
                min_value=1,
                max_value=200,
                help_text="Each round measures one more pattern. More rounds: more patterns, "
                "each noisier. Leave empty to choose automatically.",
                widget=WHOLE_NUMBER_INPUT,
            ),
        }

    def params(self, form, cleaned):
        k = min(cleaned.get("mwem_marginal_size") or 2, len(cleaned["columns"]))
        params: dict[str, Any] = {"workload": mwem_workload.marginals_spec(k)}
        if cleaned.get("mwem_rounds"):
            params["rounds"] = cleaned["mwem_rounds"]
        return params

    def progress_label(self, done: int, total: int) -> str:
        return f"Round {done} of {total}"

    def accuracy_lines(self, plan, schema, columns, row_count) -> list[str]:
        noise = (
            f"Each measured count gets random noise of typically ±{plan.expected_error:,.1f} rows."
        )
        if plan.details.get("full_table"):
            return [
                f"The workload asks for the full table ({plan.support:,} cells); MWEM will "
                "measure every cell of it once with the whole budget, and every pattern is a "
                "sum of them.",
                noise,
                relative_error_line(plan.expected_error, _rows_per_cell(plan, row_count)),
            ]
        return [
            _rounds_line(
                plan.details["workload"], plan.details["rounds"], plan.details.get("anneals", False)
            )
            + _pairs_words(plan.details.get("pairs_inside", 0)),
            noise,
            relative_error_line(plan.expected_error, _rows_per_cell(plan, row_count)),
            *(
                [
                    "Patterns that are not measured are only as good as the model's guess from the "
                    "others."
                ]
                if plan.details["workload"] > 1
                else []
            ),
        ]

    def preview_warnings(self, plan, schema, columns, row_count) -> list[str]:
        return relative_error_warning(plan.expected_error, _rows_per_cell(plan, row_count))

    def preview_table(self, plan, schema, columns, n):
        details = plan.details
        if details.get("full_table"):
            return _full_table_preview(plan, n)
        init_scale, rounds = details.get("init_scale", 0.0), details["rounds"]
        rows = []
        if init_scale:
            rows.append(
                interval_row(
                    f"Each count of the {details['columns']} one-way tables measured first",
                    accuracy.discrete_laplace_half_width(init_scale),
                    MEASUREMENTS,
                )
            )
        rows.append(
            interval_row(
                f"Each count of the {'up to ' if details.get('anneals') else ''}{rounds} tables "
                "measured in rounds",
                accuracy.plan_half_width(plan, n),
                f"{MEASUREMENTS}; which tables is chosen privately, from the data"
                + (
                    "; at most this, narrower in rounds given more ε"
                    if details.get("anneals")
                    else ""
                ),
            )
        )
        cells = details["median_cells"]
        measured = 0.5 * cells * expected_abs_noise(plan.scale or 0.0) / n
        marginals = [
            marginal_row(
                f"A measured table of {cells:,} cells",
                measured,
                "at least this (the measurement noise); the synthetic rows add their sampling",
            ),
            {
                "marginal": "Tables not measured",
                "tvd": "depends on the data",
                "note": "only as good as the model's guess from the measured ones: see the "
                "verdict on the results page",
            },
        ]
        return rows, marginals

    def public_charts(self, release, schema) -> list[dict]:
        found = super().public_charts(release, schema)
        rounds = (release.trace or {}).get("trace")
        if rounds and "selected_error_estimate" in rounds[0]:  # older traces lack it
            found.append(
                charts.chart(
                    "MWEM: estimated error by round",
                    charts.mwem_rounds_figure(rounds),
                    "From MWEM's public trace: noisy measurements, no raw data.",
                    good="Good: the line falls and levels off near the dashed noise level; "
                    "still falling at the last round means more rounds (or more ε) would help.",
                )
            )
        return found

    def results_sections(self, request, release) -> dict:
        if MEASUREMENTS not in packaging.stored_names(release):
            return {}
        rows = packaging.cached_json(release, "measurements-v1", lambda: _measurements(release))
        return {"measurements": rows}

    def custodian_report(self, schema, columns, frame, files) -> dict:
        report = super().custodian_report(schema, columns, frame, files)
        if MEASUREMENTS in files:
            measured = json.loads(files[MEASUREMENTS])["measurements"]
            report["workload"] = comparisons.measurement_errors(schema, frame, measured)
        return report


def _full_table_preview(plan, n):
    """MWEM's plan when it measures the full table once (mechanisms.mwem.plan.measures_joint)."""
    cells = plan.support
    rows = [
        interval_row(
            f"Each count of the full table ({cells:,} cells), measured once",
            accuracy.plan_half_width(plan, n),
            MEASUREMENTS,
        )
    ]
    marginals = [
        marginal_row(
            f"The full table of {cells:,} cells",
            0.5 * cells * expected_abs_noise(plan.scale or 0.0) / n,
            "at least this (the measurement noise); the synthetic rows add their sampling",
        ),
        {
            "marginal": "Each table the workload asks for",
            "tvd": "at most the full table's",
            "note": "a sum of measured cells: their noise partly cancels",
        },
    ]
    return rows, marginals


def _measurements(release) -> list[dict]:
    """One row per MWEM measurement: the table, when, its counts and their 95% half-width
    (from measurements.json: public, no data)."""
    document = json.loads(packaging.stored_file(release, MEASUREMENTS))
    start = len(release.columns) if document["budget_split"]["initial_one_way"] else 0
    once = document["budget_split"].get("full_table")  # the one measurement, no selection
    rows = []
    for index, record in enumerate(document["measurements"]):
        query = record["query"]
        lower, noisy = record.get("ci_lower"), record["noisy_answer"]
        half = noisy[0] - lower[0] if lower else None
        rows.append(
            {
                "table": " × ".join(query["columns"])
                + (" (a box)" if query["type"] == "box" else ""),
                "when": "start"
                if index < start
                else ("once, the whole budget" if once else f"round {index - start + 1}"),
                "cells": len(noisy),
                "half_width": "—" if half is None else f"{half:,}",
            }
        )
    return rows


KIND = Mwem("mwem")


def _rows_per_cell(plan, row_count) -> float:
    """Rows in an average cell of what MWEM measures: of the full table, or of the workload's
    median pattern."""
    cells = plan.support if plan.details.get("full_table") else plan.details["median_cells"]
    return row_count / cells


def _pairs_words(pairs: int) -> str:
    """The pairs of columns inside the workload's larger patterns that rounds may also measure
    (`mechanisms.mwem.selection_candidates`), in words ("" when there are none)."""
    if not pairs:
        return ""
    return (
        f" A round may also measure one of the {pairs} pairs of columns inside them: a pair's "
        "table has fewer counts, so the same noise weighs less on each."
    )


def _rounds_line(patterns: int, rounds: int, anneals: bool = False) -> str:
    """What MWEM's rounds measure, in words (a pattern may be chosen again in a later round).

    ``anneals`` (the default plan, ``mechanisms.mwem.plan.RoundSchedule``): the rounds are at
    most ``rounds``, and the sentence says why there may be fewer.
    """
    fewer = (
        " It may use fewer rounds: after a round whose measurement was mostly noise, each later "
        "round gets twice the budget, so fewer tables are measured, each more precisely."
        if anneals and rounds > 1
        else ""
    )
    up_to = "up to " if anneals and rounds > 1 else ""
    its = up_to or "its "
    if patterns == 1:
        return "The workload has 1 pattern (a table of counts); MWEM will measure it " + (
            f"in each of {its}{rounds} rounds.{fewer}" if rounds > 1 else "once."
        )
    if rounds < patterns:
        each = f"{up_to}{rounds} of them, each round the one its model gets most wrong."
    else:
        each = (
            f"one in each of {its}{rounds} rounds, the one its model gets most wrong at "
            "the time (a pattern may be measured again)."
        )
    return (
        f"The workload has {patterns} patterns (tables of counts); MWEM will measure {each}" + fewer
    )
