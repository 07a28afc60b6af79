"""The "ask a new range question" form of a range-count release (answered for free).

Questions in words: each column "from" a value and/or "below" one (a column left empty on both
sides takes any value), so "age between 35 and 45", "latitude from 42.03" (north of it) and
"hours below 20" are typed as said; with two columns, one side of the line through two points;
and, for anything else, a weighted sum a₁·x₁ + a₂·x₂ + … ≤ b. Typed values are answered as typed
(`answer_query`), never moved: where the range cuts grid cells, its 95% interval also covers the
rows of the cut cells (`mechanisms.range_count.intervals`), as the release's own off-grid
answers do, and the nearest range on the grid's edges is answered beside it, named, with the
narrower interval an exact range gets.
"""

import math

from django import forms

from dpportal.core.form_fields import DECIMAL_INPUT, choice_field

BOX, LINE, HALFSPACE = "box", "line", "halfspace"
SIDES = (
    ("below", "Below the line (or on it)"),
    ("above", "Above the line (or on it)"),
)


KINDS = [
    (BOX, "Each column from a value, below a value, or both (between)"),
    (LINE, "One side of the line through two points (two columns)"),
    (HALFSPACE, "Advanced: a weighted sum a₁·x₁ + a₂·x₂ + … ≤ b"),
]


class RangeQueryForm(forms.Form):
    """A new range question for a released range-count structure (answered for free).

    With the released grid (`edges`: per column (lower, upper, cells)), each from/below input
    has a slider over the grid's bounds in steps of one cell beside it (`sliders`;
    static/js/range_sliders.js writes the edge of a moved slider into its input, and moves the
    slider next to a typed value without changing it).
    """

    kind = forms.ChoiceField(
        label="Kind of range",
        widget=forms.RadioSelect,
        initial=BOX,
        choices=KINDS,
    )
    side = forms.ChoiceField(label="Which side", choices=SIDES, initial="below", required=False)
    b = forms.FloatField(label="b (the right-hand side)", required=False, widget=DECIMAL_INPUT)

    def __init__(self, *args, columns, edges=None, bounds=None, **kwargs):
        """`bounds`: per column (lower, upper) of the released structure, where every row's
        value lies; a box beyond them is refused in words (None: not checked)."""
        super().__init__(*args, **kwargs)
        self.columns, self.edges, self.bounds = list(columns), edges, bounds
        if len(self.columns) != 2:
            choice_field(self, "kind").choices = [c for c in KINDS if c[0] != LINE]
        for i, name in enumerate(self.columns):
            self._box_fields(i, name)
            self.fields[f"a_{i}"] = forms.FloatField(
                label=f"{name}: weight a", required=False, widget=DECIMAL_INPUT
            )
        if len(self.columns) == 2:
            for point in (1, 2):
                for i, name in enumerate(self.columns):
                    self.fields[f"p{point}_{i}"] = forms.FloatField(
                        label=f"Point {point}: {name}", required=False, widget=DECIMAL_INPUT
                    )

    def _box_fields(self, i, name):
        box_widget, help_text = DECIMAL_INPUT, ""
        if self.edges is not None:
            lower, upper, cells = self.edges[i]
            step = (upper - lower) / cells
            box_widget = forms.TextInput(  # not type=number: see release_forms' note
                attrs={"inputmode": "decimal", "data-step": f"{step:.12g}"}
            )
            help_text = (
                f"Values from {lower:g} to {upper:g}; the grid's edges are every {step:.6g}. "
                "A value between edges is answered as typed, with a wider interval."
            )
        self.fields[f"lo_{i}"] = forms.FloatField(
            label=f"{name} from", required=False, widget=box_widget
        )
        self.fields[f"hi_{i}"] = forms.FloatField(
            label=f"{name} below",
            required=False,
            widget=box_widget,
            help_text=f"Leave “from” empty for “{name} below …”, “below” empty for “{name} "
            f"from … up”, both empty for any {name}. {help_text}".strip(),
        )

    def box_fields(self):
        """Per column: its from and below inputs, each with its slider (None without a grid)."""
        return [
            [(self[f"{key}_{i}"], self._slider(i, key)) for key in ("lo", "hi")]
            for i in range(len(self.columns))
        ]

    def _slider(self, i, key) -> dict | None:
        """A slider over column i's grid: min and max its bounds, one step per cell."""
        if self.edges is None:
            return None
        lower, upper, cells = self.edges[i]
        field = self[f"{key}_{i}"]
        value = field.value() if self.is_bound else ""
        try:
            start = min(max(float(value or ""), lower), upper)
        except ValueError:
            start = lower if key == "lo" else upper
        return {
            "id": f"{field.auto_id}_slider",
            "input_id": field.auto_id,
            "label": f"{field.label}, on the grid",
            "min": _edge_text(lower),
            "max": _edge_text(upper),
            "step": _edge_text((upper - lower) / cells),
            "value": _edge_text(start),
        }

    def line_fields(self):
        """The two points' inputs (two columns only), then the side."""
        if len(self.columns) != 2:
            return []
        return [self[f"p{p}_{i}"] for p in (1, 2) for i in range(2)]

    def halfspace_fields(self):
        return [self[f"a_{i}"] for i in range(len(self.columns))]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        kind = data.get("kind")
        if kind == BOX:
            self._check_box(data)
        elif kind == LINE:
            self._check_line(data)
        elif kind == HALFSPACE:
            for i, name in enumerate(self.columns):
                if data.get(f"a_{i}") is None:
                    self.add_error(f"a_{i}", f"Enter a number for {name}.")
            if data.get("b") is None:
                self.add_error("b", "Enter a number for b.")
        return data

    def _check_box(self, data):
        for i, name in enumerate(self.columns):
            lo, hi = data.get(f"lo_{i}"), data.get(f"hi_{i}")
            if lo is not None and hi is not None and lo >= hi:
                self.add_error(
                    f"hi_{i}",
                    f"For {name}, ‘from’ ({lo:g}) must be below ‘below’ ({hi:g}); swap them or "
                    "widen the range.",
                )
            elif self.bounds is not None:
                self._check_within(i, name, lo, hi)

    def _check_within(self, i, name, lo, hi):
        """Refuse a side left open whose other side is beyond the column's bounds: no row."""
        lower, upper = self.bounds[i]
        runs = f"{name} runs from {lower:g} to {upper:g} in this release"
        if lo is not None and hi is None and lo > upper:
            self.add_error(
                f"lo_{i}",
                f"No row is {name} from {lo:g} up: {runs}; ask from a value below {upper:g}.",
            )
        if hi is not None and lo is None and hi < lower:
            self.add_error(
                f"hi_{i}",
                f"No row is {name} below {hi:g}: {runs}; ask below a value above {lower:g}.",
            )

    def _check_line(self, data):
        points = [data.get(f"p{p}_{i}") for p in (1, 2) for i in range(2)]
        for (p, i), value in zip(((1, 0), (1, 1), (2, 0), (2, 1)), points, strict=True):
            if value is None:
                self.add_error(f"p{p}_{i}", f"Enter a number for point {p}'s {self.columns[i]}.")
        if None in points:
            return
        x1, y1, x2, y2 = points
        if x1 == x2:
            name = self.columns[0]
            self.add_error(
                "p2_0",
                f"The two points have the same {name}, so the line is upright: ask for “{name} "
                f"below {x1:g}” or “{name} from {x1:g}” as a range on each column instead.",
            )
            return
        line = line_halfspace([(x1, y1), (x2, y2)], data.get("side") or "below")
        if not all(math.isfinite(v) for v in (*line["a"], line["b"])):
            self.add_error(
                None,
                "These points are too far apart to compute their line with 64-bit numbers; "
                "choose points nearer the columns' values, on the same line.",
            )

    def query(self, lower, upper) -> dict:
        """The question as the mechanism reads it (`lower`, `upper`: the columns' bounds, for
        a side left open)."""
        data, indices = self.cleaned_data, range(len(self.columns))
        if data["kind"] == BOX:
            return {
                "type": "box",
                "lo": [_or(data[f"lo_{i}"], lower[i]) for i in indices],
                "hi": [_or(data[f"hi_{i}"], upper[i]) for i in indices],
            }
        if data["kind"] == LINE:
            return line_halfspace(
                [(data["p1_0"], data["p1_1"]), (data["p2_0"], data["p2_1"])],
                data.get("side") or "below",
            )
        return {"type": "halfspace", "a": [data[f"a_{i}"] for i in indices], "b": data["b"]}

    def words(self) -> str:
        """The question as asked, in words."""
        data = self.cleaned_data
        if data["kind"] == BOX:
            parts = [
                _interval_words(name, data[f"lo_{i}"], data[f"hi_{i}"])
                for i, name in enumerate(self.columns)
            ]
            asked = [p for p in parts if p]
            return " and ".join(asked) if asked else "every row"
        if data["kind"] == LINE:
            (x, y), side = self.columns, data.get("side") or "below"
            return (
                f"{side} the line through ({x} {data['p1_0']:g}, {y} {data['p1_1']:g}) and "
                f"({x} {data['p2_0']:g}, {y} {data['p2_1']:g})"
            )
        terms = " + ".join(f"{data[f'a_{i}']:g}·{name}" for i, name in enumerate(self.columns))
        return f"{terms} ≤ {data['b']:g}"


def line_halfspace(points, side) -> dict:
    """The half-plane below (or above) the line through two points of different first
    coordinates, as a·x ≤ b: below is y·(x2 - x1) - x·(y2 - y1) ≤ y1·(x2 - x1) - x1·(y2 - y1)
    with the points ordered by x, above its negation (both keep the line itself)."""
    (x1, y1), (x2, y2) = sorted(points)
    dx, dy = x2 - x1, y2 - y1
    a, b = [-dy, dx], dx * y1 - dy * x1
    if side == "above":
        a, b = [-a[0], -a[1]], -b
    return {"type": "halfspace", "a": [float(v) for v in a], "b": float(b)}


def _or(value, default):
    return default if value is None else value


def _interval_words(name, lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"{name} between {lo:g} and {hi:g} (from {lo:g}, below {hi:g})"
    if lo is not None:
        return f"{name} from {lo:g} up"
    if hi is not None:
        return f"{name} below {hi:g}"
    return ""


def _edge_text(value: float | None) -> str | None:
    """A grid edge or bound as the inputs show it (12 significant digits, no exponent for the
    bounds a schema declares)."""
    return None if value is None else f"{value:.12g}"
