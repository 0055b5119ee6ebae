// The console's only script: live fragments. An element with data-refresh="URL" has its
// content replaced by the HTML that URL answers, every data-interval milliseconds (default
// 5000), while the tab is visible. A failed fetch leaves the content as it was and marks the
// element stale; the next tick tries again. Pages work without it (they are just not live).
(function () {
  "use strict";
  function refresh(element) {
    if (document.hidden || element.dataset.busy) return;
    element.dataset.busy = "1";
    fetch(element.dataset.refresh, { credentials: "same-origin", headers: { "X-Fragment": "1" } })
      .then(function (response) {
        if (!response.ok) throw new Error(String(response.status));
        return response.text();
      })
      .then(function (html) {
        element.innerHTML = html;
        element.classList.remove("stale");
        element.dataset.refreshed = String(Date.now());
      })
      .catch(function () { element.classList.add("stale"); })
      .finally(function () { delete element.dataset.busy; });
  }
  function start() {
    document.querySelectorAll("[data-refresh]").forEach(function (element) {
      var interval = parseInt(element.dataset.interval || "5000", 10);
      refresh(element);
      setInterval(function () { refresh(element); }, Math.max(1000, interval));
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
