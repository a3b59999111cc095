// The new-run form's estimate: the form's body is sent to POST /api/runs/estimate a moment after
// the last change (an answer to an older body than the latest sent is dropped), and the figures,
// each with its source, the domains' figures per completion and the assumptions are shown. A body
// the server refuses shows its problems here; "Validate" puts them beside their fields.
"use strict";

(() => {
  const { el, api, fmt } = Temper;
  const form = document.getElementById("run-form");
  const card = document.getElementById("estimate");
  if (!form || !card || !window.TemperRunForm) return;
  const state = document.getElementById("estimate-state");
  const table = document.getElementById("estimate-figures");
  const details = document.getElementById("estimate-details");
  const costEl = document.getElementById("estimate-cost");
  const LABELS = {
    completions: "Completions", generated_tokens: "Generated tokens", trained_tokens: "Trained tokens",
    wall_s: "Wall (ETA)", gpu_s: "GPU", cpu_s: "CPU (driver)", sandbox_s: "Sandbox", judge_tokens: "Judge tokens",
  };
  const DELAY_MS = 400;
  let timer = null, sent = 0;

  function number(v) { return v === null || v === undefined ? "–" : v >= 1000 ? Math.round(v).toLocaleString("en") : fmt(v); }

  function render(out) {
    state.textContent = `${out.steps.value} steps (${out.steps.source}) of ${out.rollout.prompts_per_step} tasks × ${out.rollout.n} completions`;
    state.dataset.state = "ok";
    const rows = Object.entries(out.figures).map(([key, f]) => {
      const missing = f.unmeasured.length ? ` Not measured (counted as 0): ${f.unmeasured.join(", ")}.` : "";
      return el("tr", { "data-figure": key },
        el("th", { text: LABELS[key] || key }),
        el("td", { text: "per_step_text" in f ? f.per_step_text : number(f.per_step) }),
        el("td", { "data-testid": `estimate-${key}`, "data-value": f.value ?? "", text: "text" in f ? f.text : number(f.value) }),
        el("td", { class: "muted", text: f.source + "." + missing }));
    });
    table.querySelector("tbody").replaceChildren(...rows);
    costLine(out.cost);
    const domainRows = out.domains.map((d) => el("tr", { "data-slug": d.slug },
      el("td", { text: d.slug }), el("td", { text: (100 * d.share).toFixed(1) + "%" }), el("td", { text: fmt(d.completions_per_step) }),
      el("td", { text: fmt(d.tokens_per_completion) }), el("td", { text: fmt(d.seconds_per_completion) }),
      el("td", { "data-testid": `estimate-source-${d.slug}` }, el("b", { text: d.source }), " ", el("span", { class: "muted", text: d.detail }))));
    document.querySelector("#estimate-domains tbody").replaceChildren(...domainRows);
    document.getElementById("estimate-assumptions").replaceChildren(...out.assumptions.map((a) => el("li", { text: a })));
    table.hidden = details.hidden = false;
  }

  // The figures in money at the admin's prices: each priced part, the parts without a price, and
  // the money budget when one is set.
  function costLine(c) {
    const parts = { gpu: "GPU", cpu: "CPU", sandbox: "sandbox", judge: "judge tokens" };
    const known = Object.keys(parts).filter((p) => c[p] !== null && Number(c[p]) > 0).map((p) => `${parts[p]} ${c[p]}`);
    const unknown = Object.keys(parts).filter((p) => c[p] === null).map((p) => parts[p]);
    const total = c.total === null ? "unknown" : `${c.total} ${c.currency}`;
    let text = `Cost: ${total}` + (known.length ? ` (${known.join(", ")})` : "") + ".";
    if (unknown.length) text += ` No price or no measurement for: ${unknown.join(", ")}.`;
    if (c.budget !== null) text += c.within_budget === null ? ` Budget ${c.budget} ${c.currency}: cannot tell.`
      : c.within_budget ? ` Within the budget of ${c.budget} ${c.currency}.` : ` Over the budget of ${c.budget} ${c.currency}: the run would stop early.`;
    costEl.textContent = text;
    costEl.dataset.total = c.total ?? "";
    costEl.hidden = false;
  }

  function refused(err) {
    const errors = err.errors && err.errors.length ? err.errors.map((e) => (e.path ? `${e.path}: ${e.message}` : e.message)) : [err.detail];
    state.textContent = "No estimate: " + errors.join("; ");
    state.dataset.state = "invalid";
    table.hidden = details.hidden = costEl.hidden = true;
  }

  async function refresh() {
    const body = window.TemperRunForm.body();
    if (!body.domains.length) { state.textContent = "Pick domains to see an estimate."; state.dataset.state = ""; table.hidden = details.hidden = costEl.hidden = true; return; }
    if (!String(body.name || "").trim()) body.name = "estimate"; // the name changes nothing in the estimate
    const mine = ++sent;
    state.dataset.state = "pending";
    try {
      const out = await api("POST", "/api/runs/estimate", body);
      if (mine === sent) render(out);
    } catch (err) {
      if (mine === sent) refused(err);
    }
  }

  function later() { clearTimeout(timer); timer = setTimeout(refresh, DELAY_MS); }
  for (const kind of ["input", "change", "mixchange"]) form.addEventListener(kind, later);
  later();
})();
