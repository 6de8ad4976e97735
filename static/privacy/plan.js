// Erasure plan page: a print button (the page has print styles).
(function () {
  "use strict";
  const button = document.querySelector("[data-print]");
  if (!button) return;
  button.hidden = false;
  button.addEventListener("click", function () { window.print(); });
})();
