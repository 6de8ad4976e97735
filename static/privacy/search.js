// Subject search: "Add an identifier" clones the last identifier row with fresh names.
(function () {
  "use strict";
  const fieldset = document.querySelector(".identifier-rows");
  if (!fieldset) return;
  const button = fieldset.querySelector("[data-add-identifier]");
  const max = Number(fieldset.dataset.max || 20);
  button.hidden = false;
  button.addEventListener("click", function () {
    const rows = fieldset.querySelectorAll(".identifier-row");
    if (rows.length >= max) return;
    const copy = rows[rows.length - 1].cloneNode(true);
    copy.querySelectorAll("input, select").forEach(function (input) {
      input.name = input.name.replace(/-\d+$/, "-" + rows.length);
      input.removeAttribute("required");
      if (input.tagName === "SELECT") input.selectedIndex = 0; else input.value = "";
    });
    fieldset.insertBefore(copy, button);
    copy.querySelector("input").focus();
    if (rows.length + 1 >= max) button.hidden = true;
  });
})();
