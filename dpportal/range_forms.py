"""The "ask a new range question" form of a range-count release (answered for free)."""

from django import forms

from .catalogue import DECIMAL_INPUT


class RangeQueryForm(forms.Form):
    """A new range question for a released range-count structure (answered for free).

    With the released grid (`edges`: per column (lower, upper, cells)), the from/to inputs
    name the grid's edges and a typed value moves to the nearest edge (`inputs.snap_box`), so
    a box is answered exactly, with no rounding; the page says which box was answered.
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
            box_widget, help_text = DECIMAL_INPUT, ""
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
                label=f"{name}: from", required=False, widget=box_widget, help_text=help_text
            )
            self.fields[f"hi_{i}"] = forms.FloatField(
                label=f"{name}: up to (not including)", required=False, widget=box_widget
            )
            self.fields[f"a_{i}"] = forms.FloatField(
                label=f"{name}: weight a", required=False, widget=DECIMAL_INPUT
            )

    def box_fields(self):
        return [(self[f"lo_{i}"], self[f"hi_{i}"]) for i in range(len(self.columns))]

    def halfspace_fields(self):
        return [self[f"a_{i}"] for i in range(len(self.columns))]

    def clean(self):
        data = super().clean()
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
