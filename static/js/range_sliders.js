// "Ask a new range question" on a grid release: a slider beside each from / below input, from
// the lower to the upper bound in steps of one grid cell. Moving a slider writes its grid edge
// into the input (the input is what the form submits); typing moves the slider to the nearest
// edge but keeps the value as typed: the server answers the range as typed (with an interval
// that covers the cells it cuts) and names the nearest range on the grid's edges beside it.
// Without this script the sliders stay hidden.
(function () {
  "use strict";

  function text(value) { return String(Number(value.toPrecision(12))); }

  function connect(slider) {
    var input = document.getElementById(slider.dataset.input);
    if (!input) { return; }
    var lower = Number(slider.min), upper = Number(slider.max), step = Number(slider.step);
    var cells = Math.round((upper - lower) / step);

    function nearest(value) {
      var k = Math.min(Math.max(Math.round((value - lower) / step), 0), cells);
      return k === cells ? upper : lower + k * step;
    }
    function place(edge) {
      slider.value = String(edge);
      slider.setAttribute("aria-valuetext", text(edge));
    }
    function typed() {
      var value = input.value.trim() === "" ? NaN : Number(input.value);
      return isFinite(value) ? nearest(value) : null;
    }

    slider.addEventListener("input", function () {
      var edge = nearest(Number(slider.value));
      input.value = text(edge);
      place(edge);
    });
    input.addEventListener("input", function () {
      var edge = typed();
      if (edge !== null) { place(edge); }
    });
    place(typed() === null ? nearest(Number(slider.value)) : typed());
    slider.hidden = false;
  }

  document.querySelectorAll("input.grid-slider").forEach(connect);
})();
