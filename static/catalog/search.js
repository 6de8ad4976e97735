// The search box in the top bar: suggestions as you type (a server-rendered list).
// Enter without choosing a suggestion submits to the full search page.
(function () {
  "use strict";

  const form = document.querySelector("form.global-search[data-suggest]");
  if (!form) return;
  const input = form.querySelector("input[name=q]");
  const box = document.getElementById("global-suggest");
  let timer = null;
  let seq = 0;

  function links() {
    return Array.from(box.querySelectorAll("a"));
  }

  function close() {
    box.hidden = true;
    input.setAttribute("aria-expanded", "false");
  }

  async function update() {
    const q = input.value.trim();
    if (q.length < 2) {
      close();
      return;
    }
    const mine = ++seq;
    const response = await fetch(form.dataset.suggest + "?q=" + encodeURIComponent(q), {
      credentials: "same-origin",
      headers: { "X-Fragment": "1" },
    });
    if (mine !== seq || !response.ok) return;
    box.innerHTML = await response.text();
    box.hidden = false;
    input.setAttribute("aria-expanded", "true");
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(update, 150);
  });

  function move(delta) {
    const items = links();
    if (!items.length) return;
    const current = items.indexOf(document.activeElement);
    const next = current === -1 ? (delta > 0 ? 0 : items.length - 1) : current + delta;
    if (next < 0) {
      input.focus();
      return;
    }
    items[Math.min(next, items.length - 1)].focus();
  }

  form.addEventListener("keydown", (event) => {
    if (box.hidden) return;
    if (event.key === "ArrowDown") {
      event.preventDefault();
      move(1);
    } else if (event.key === "ArrowUp") {
      event.preventDefault();
      move(-1);
    } else if (event.key === "Escape") {
      close();
      input.focus();
    }
  });

  document.addEventListener("click", (event) => {
    if (!form.contains(event.target)) close();
  });
  form.addEventListener("focusout", (event) => {
    if (!form.contains(event.relatedTarget)) setTimeout(() => { if (!form.contains(document.activeElement)) close(); }, 100);
  });
})();
