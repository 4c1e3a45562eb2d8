// The console's only script, served from /static/ so that the Content-Security-Policy can
// forbid every inline script. It keeps the live part of a page current from its server-sent
// events, submits the Plan box's change, and makes "Back" links go back.
(function () {
  "use strict";
  var live = document.querySelector("[data-events]");
  if (live) {
    var source = new EventSource(live.getAttribute("data-events"));
    source.addEventListener(live.getAttribute("data-event"), function (event) {
      live.innerHTML = event.data;
    });
    var box = document.getElementById("plan");
    var companion = document.getElementById("plan-box");
    var form = document.getElementById("composer");
    var modeButton = document.getElementById("mode-button");
    if (box && form && modeButton) {
      box.addEventListener("change", function () {
        form.requestSubmit(modeButton);
      });
      source.addEventListener("state", function (event) {
        var state = JSON.parse(event.data);
        box.checked = state.armed;
        box.disabled = state.busy || !state.can_arm;
        if (companion) {
          companion.disabled = box.disabled;
        }
      });
    }
  }
  document.querySelectorAll("a[data-back]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      history.back();
    });
  });
})();
