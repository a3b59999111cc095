// The run page's tags: comma-separated in one field, saved through POST /api/runs/{id}/tags (the
// server checks each tag and the role); the chips link to the runs list filtered by the tag.
"use strict";

(() => {
  const box = document.getElementById("run-tags");
  const form = document.getElementById("tags-form");
  if (!box || !form) return;
  const input = document.getElementById("tags-input");
  const error = document.getElementById("tags-error");
  const list = document.getElementById("tag-list");

  function draw(tags) {
    list.replaceChildren(...(tags.length ? tags.flatMap((t) => [
      Temper.el("a", { class: "badge tag", href: "/?tag=" + encodeURIComponent(t), "data-testid": "run-tag", text: t }), " "])
      : [Temper.el("span", { class: "muted", text: "none" })]));
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    const tags = input.value.split(",").map((t) => t.trim().toLowerCase()).filter(Boolean);
    try {
      const run = await Temper.api("POST", `/api/runs/${box.dataset.run}/tags`, { tags });
      draw(run.tags);
      input.value = run.tags.join(", ");
    } catch (err) {
      error.textContent = err.errors && err.errors.length
        ? err.errors.map((e) => e.message).join("; ") : err.detail;
    }
  });
  // The button is disabled until now: a click before this script runs (it loads after plotly)
  // would submit the form as a plain GET and lose the tags.
  form.querySelector("button[type=submit]").disabled = false;
})();
