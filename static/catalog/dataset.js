// Dataset page: load the lineage sections, edit in place, compare schema versions.
// Every section is server-rendered HTML; this file only fetches and swaps fragments.
(function () {
  "use strict";

  const FRAGMENT = { "X-Fragment": "1" };

  function toNodes(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content;
  }

  async function fetchFragment(url, options) {
    const response = await fetch(url, {
      credentials: "same-origin",
      ...options,
      headers: { ...FRAGMENT, ...((options && options.headers) || {}) },
    });
    return { ok: response.ok, status: response.status, html: await response.text() };
  }

  // Sections whose content comes from another page (lineage, runs, orphans).
  function loadFragments(root) {
    root.querySelectorAll("[data-fragment]").forEach(async (el) => {
      try {
        const result = await fetchFragment(el.dataset.fragment);
        el.innerHTML = result.ok ? result.html : '<p class="notice notice-bad">Could not load this section.</p>';
      } catch (err) {
        el.innerHTML = '<p class="notice notice-bad">Could not load this section.</p>';
      }
      el.setAttribute("aria-busy", "false");
    });
  }

  // Keep what an edit replaced, so Cancel restores it without a round trip.
  const originals = new WeakMap();

  function swap(target, html) {
    const fragment = toNodes(html);
    const first = fragment.firstElementChild;
    if (target.tagName === "TR" || (first && first.tagName === "TR")) {
      target.replaceWith(fragment);
      return first;
    }
    target.replaceChildren(fragment);
    return target;
  }

  function editableOf(el) {
    return el.closest("[data-editable]");
  }

  async function openEditor(link) {
    const target = editableOf(link);
    if (!target) return;
    const result = await fetchFragment(link.href);
    if (!result.ok) {
      window.location.href = link.href;
      return;
    }
    const snapshot = target.tagName === "TR" ? target.cloneNode(true) : target.innerHTML;
    const placed = swap(target, result.html);
    originals.set(placed, snapshot);
    const field = placed.querySelector("select, input:not([type=hidden]), textarea");
    if (field) field.focus();
  }

  function cancelEditor(link) {
    const target = editableOf(link);
    if (!target || !originals.has(target)) return false;
    const snapshot = originals.get(target);
    let restored = target;
    if (typeof snapshot === "string") {
      target.innerHTML = snapshot;
    } else {
      target.replaceWith(snapshot);
      restored = snapshot;
    }
    const again = restored.querySelector("[data-edit]");
    if (again) again.focus();
    return true;
  }

  async function refreshHistory() {
    const history = document.getElementById("history");
    if (!history) return;
    const result = await fetchFragment(history.dataset.refresh);
    if (result.ok) {
      history.innerHTML = result.html;
      const first = history.querySelector("tbody tr");
      if (first) first.classList.add("saved-flash");
    }
  }

  async function submitEditor(form) {
    const target = editableOf(form);
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    const result = await fetchFragment(form.action, { method: "POST", body: new FormData(form) });
    if (result.status === 403) {
      form.insertAdjacentHTML("afterbegin", '<p class="errorlist" role="alert">Your role cannot edit the catalog.</p>');
      if (button) button.disabled = false;
      return;
    }
    const snapshot = originals.get(target);
    const placed = swap(target, result.html);
    if (result.ok) {
      placed.classList.add("saved-flash");
      const again = placed.querySelector("[data-edit]");
      if (again) again.focus();
      refreshHistory();
    } else {
      originals.set(placed, snapshot);
      const invalid = placed.querySelector(".errorlist");
      if (invalid) invalid.scrollIntoView({ block: "nearest" });
    }
  }

  document.addEventListener("click", (event) => {
    const edit = event.target.closest("a[data-edit]");
    if (edit) {
      event.preventDefault();
      openEditor(edit);
      return;
    }
    const cancel = event.target.closest("a[data-cancel]");
    if (cancel && cancelEditor(cancel)) event.preventDefault();
    const add = event.target.closest("button[data-add-owner]");
    if (add) addOwner(add.form);
  });

  // The owner picker: the chosen team or user joins the comma-separated owners field
  // (the server checks it is known, or that adding a new owner was asked for).
  function addOwner(form) {
    const name = form.elements.add_owner.value.trim();
    const type = form.elements.add_owner_type.value.trim();
    if (!name) {
      form.elements.add_owner.focus();
      return;
    }
    const owners = form.elements.owners;
    const listed = owners.value.split(",").map((item) => item.split("(")[0].trim());
    if (!listed.includes(name)) {
      const entry = type ? name + " (" + type + ")" : name;
      const current = owners.value.trim().replace(/,$/, "");
      owners.value = current ? current + ", " + entry : entry;
    }
    form.elements.add_owner.value = "";
    form.elements.add_owner_type.value = "";
    form.elements.add_owner.focus();
  }

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-fragment-form]");
    if (form) {
      event.preventDefault();
      submitEditor(form);
      return;
    }
    const compare = event.target.closest("form[data-compare]");
    if (compare) {
      event.preventDefault();
      const url = compare.action + "?" + new URLSearchParams(new FormData(compare)).toString();
      fetchFragment(url).then((result) => {
        const out = document.getElementById("compare-result");
        out.innerHTML = result.html;
      });
    }
  });

  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const form = event.target.closest && event.target.closest("form[data-fragment-form]");
    const cancel = form && form.querySelector("a[data-cancel]");
    if (cancel) {
      event.preventDefault();
      cancelEditor(cancel);
    }
  });

  loadFragments(document);
})();
