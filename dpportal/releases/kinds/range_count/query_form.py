"""The "ask a new range question" form of a range-count release (answered for free)."""

from django import forms

from dpportal.core.form_fields import DECIMAL_INPUT


class RangeQueryForm(forms.Form):
    """A new range question for a released range-count structure (answered for free).

    With the released grid (`edges`: per column (lower, upper, cells)), the from/to inputs
    name the grid's edges and a typed value moves to the nearest edge (`inputs.snap_box`), so
    a box is answered exactly, with no rounding; the page says which box was answered. Each
    from/to input then has a slider over the grid's bounds in steps of one cell beside it
    (`sliders`; static/js/range_sliders.js keeps the two in step and writes the edge into the
    input, which is what is submitted), and starts at the bound: the whole range.
    """

    kind = forms.ChoiceField(
        label="Kind of range",
        widget=forms.RadioSelect,
        initial="box",
        choices=[
            ("box", "An interval (one column) or a box: from–up to on each column"),
            ("halfspace", "One side of a line: a₁·x₁ + a₂·x₂ + … ≤ b"),
        ],
    )
    b = forms.FloatField(label="b (the right-hand side)", required=False, widget=DECIMAL_INPUT)

    def __init__(self, *args, columns, edges=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.columns, self.edges = list(columns), edges
        for i, name in enumerate(self.columns):
            box_widget, help_text, lower, upper = DECIMAL_INPUT, "", None, None
            if edges is not None:
                lower, upper, cells = edges[i]
                step = (upper - lower) / cells
                box_widget = forms.TextInput(  # not type=number: see release_forms' note
                    attrs={"inputmode": "decimal", "data-step": f"{step:.12g}"}
                )
                help_text = (
                    f"Grid edges every {step:.6g} from {lower:g} to {upper:g}; a value "
                    "between edges moves to the nearest one."
                )
            self.fields[f"lo_{i}"] = forms.FloatField(
                label=f"{name}: from",
                required=False,
                widget=box_widget,
                help_text=help_text,
                initial=_edge_text(lower),
            )
            self.fields[f"hi_{i}"] = forms.FloatField(
                label=f"{name}: up to (not including)",
                required=False,
                widget=box_widget,
                initial=_edge_text(upper),
            )
            self.fields[f"a_{i}"] = forms.FloatField(
                label=f"{name}: weight a", required=False, widget=DECIMAL_INPUT
            )

    def box_fields(self):
        """Per column: its from and to inputs, each with its slider (None without a grid)."""
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
        value = field.value() if self.is_bound else field.initial
        try:
            start = min(max(float(value), lower), upper)
        except (TypeError, ValueError):
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

    def halfspace_fields(self):
        return [self[f"a_{i}"] for i in range(len(self.columns))]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        keys = ["lo", "hi"] if data.get("kind") == "box" else ["a"]
        for key in keys:
            for i, name in enumerate(self.columns):
                if data.get(f"{key}_{i}") is None:
                    self.add_error(f"{key}_{i}", f"Enter a number for {name}.")
        if data.get("kind") == "halfspace" and data.get("b") is None:
            self.add_error("b", "Enter a number for b.")
        if data.get("kind") == "box":
            for i, name in enumerate(self.columns):
                lo, hi = data.get(f"lo_{i}"), data.get(f"hi_{i}")
                if lo is not None and hi is not None and lo >= hi:
                    self.add_error(
                        f"hi_{i}",
                        f"For {name}, ‘from’ ({lo:g}) must be below ‘up to’ ({hi:g}); "
                        "swap them or widen the range.",
                    )
        return data

    def query(self) -> dict:
        data, indices = self.cleaned_data, range(len(self.columns))
        if data["kind"] == "box":
            return {
                "type": "box",
                "lo": [data[f"lo_{i}"] for i in indices],
                "hi": [data[f"hi_{i}"] for i in indices],
            }
        return {"type": "halfspace", "a": [data[f"a_{i}"] for i in indices], "b": data["b"]}


def _edge_text(value: float | None) -> str | None:
    """A grid edge or bound as the inputs show it (12 significant digits, no exponent for the
    bounds a schema declares)."""
    return None if value is None else f"{value:.12g}"
