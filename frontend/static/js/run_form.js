// The new-run form: domain mix with search, weights and normalised shares; trainer settings
// rendered from the trainer's JSON Schema with defaults and inline help; "Validate" asks the
// server (POST /api/runs/validate) and shows each error beside its field before anything is saved.
"use strict";

(() => {
  const { el, api, fmt } = Temper;
  const data = Temper.pageData("form-data");
  const form = document.getElementById("run-form");
  const mix = new Map(); // slug -> weight, in the order picked

  // ------------------------------------------------------------------ domain mix
  const list = document.getElementById("domain-list");
  const search = document.getElementById("domain-search");
  const kindSelect = document.getElementById("domain-kind");
  const kinds = [...new Set(data.domains.map((d) => d.kind))].sort();
  kinds.forEach((k) => kindSelect.append(el("option", { value: k, text: k })));

  function renderList() {
    const q = search.value.trim().toLowerCase();
    const kind = kindSelect.value;
    const shown = data.domains.filter((d) => (!kind || d.kind === kind) &&
      (!q || d.slug.includes(q) || d.title.toLowerCase().includes(q) || d.family.toLowerCase().includes(q)));
    // Grouped by family, each with a box that picks (or drops) every domain of it shown.
    const families = new Map();
    for (const d of shown.slice(0, 400)) {
      const f = d.family || "(no family)";
      if (!families.has(f)) families.set(f, []);
      families.get(f).push(d);
    }
    const groups = [...families.entries()].sort((a, b) => a[0].localeCompare(b[0])).map(([family, members]) => {
      const all = el("input", { type: "checkbox", "data-testid": `pick-family-${family}`, "aria-label": `all of ${family}` });
      all.checked = members.every((d) => mix.has(d.slug));
      all.indeterminate = !all.checked && members.some((d) => mix.has(d.slug));
      all.addEventListener("change", () => {
        for (const d of members) { if (all.checked) { if (!mix.has(d.slug)) mix.set(d.slug, 1); } else mix.delete(d.slug); }
        renderList(); renderMix();
      });
      return el("details", { class: "domain-family", open: shown.length <= 40 || members.some((d) => mix.has(d.slug)) || undefined,
                             "data-testid": `family-${family}` },
        el("summary", {}, all, " ", el("b", { text: family }), " ", el("span", { class: "muted", text: `${members.length}` })),
        ...members.map((d) => {
          const box = el("input", { type: "checkbox", value: d.slug, "data-testid": `pick-${d.slug}` });
          box.checked = mix.has(d.slug);
          box.addEventListener("change", () => {
            box.checked ? mix.set(d.slug, 1) : mix.delete(d.slug);
            all.checked = members.every((m) => mix.has(m.slug));
            all.indeterminate = !all.checked && members.some((m) => mix.has(m.slug));
            renderMix();
          });
          return el("label", { class: "domain-item" }, box, " ", el("b", { text: d.slug }), " ",
            el("span", { class: "muted", text: `${d.kind}${d.team ? " · team " + d.team : ""}` }), auditBadge(d));
        }));
    });
    list.replaceChildren(...groups);
    document.getElementById("domain-count").textContent = `${shown.length} shown in ${families.size} famil${families.size === 1 ? "y" : "ies"}`;
  }

  // ------------------------------------------------------------------ verifier audits
  // A version whose audit found false positives (not overridden) cannot be pinned: the server
  // refuses it with the error at `domains.<slug>`; the form says so as soon as it is picked.
  const bySlug = new Map(data.domains.map((d) => [d.slug, d]));
  const MARKED = new Set(["unsafe", "waiting", "failed", "overridden", "warn"]);

  function auditBadge(d) {
    const a = d.audit;
    if (!a || !MARKED.has(a.tone)) return null;
    return el("span", { class: `badge audit-${a.tone}`, "data-testid": `audit-${d.slug}`, title: auditNote(d), text: a.label });
  }

  function auditNote(d) {
    const a = d.audit;
    if (!a) return "";
    const n = a.false_positives;
    if (a.blocks) {
      return `${d.slug} v${a.version}: its verifier audit found ${n} false positive${n === 1 ? "" : "s"}` +
        `${a.classes.length ? " in " + a.classes.join(", ") : ""}; a run may use this version only after an admin overrides the audit`;
    }
    if (a.state === "pending" || a.state === "running") return `v${a.version}: verifier audit ${a.state} (does not block)`;
    if (a.state === "failed") return `v${a.version}: the verifier audit failed to run (does not block)`;
    if (a.state === "overridden") return `v${a.version}: audit overridden by an admin (${n} false positive${n === 1 ? "" : "s"})`;
    if (a.warning) return `v${a.version}: ${a.false_negatives_gold} gold answer(s) fail its verifier (too strict; does not block)`;
    return "";
  }

  function renderMix() {
    const total = [...mix.values()].reduce((a, b) => a + (b > 0 ? b : 0), 0);
    const rows = [...mix.entries()].map(([slug, weight], i) => {
      const input = el("input", { type: "number", min: "0", step: "any", value: weight, "data-path": `domains[${i}].weight`,
        "aria-label": `weight of ${slug}`, "data-testid": `weight-${slug}` });
      input.addEventListener("input", () => { mix.set(slug, parseFloat(input.value)); renderShares(); });
      const d = bySlug.get(slug);
      const note = d ? auditNote(d) : "";
      return el("tr", { "data-slug": slug, class: d && d.audit && d.audit.blocks ? "blocked" : undefined },
        el("td", { "data-path": `domains[${i}].slug` }, el("a", { href: `/domains/${slug}/#verifier-audit`, text: slug }),
          note ? el("div", { class: `audit-note ${d.audit.blocks ? "blocks" : "pending"}`, "data-testid": `audit-note-${slug}`, text: note }) : null,
          el("div", { class: "field-error", "data-path-error": `domains.${slug}` })),
        el("td", {}, input, el("div", { class: "field-error", "data-path-error": `domains[${i}].weight` })),
        el("td", { class: "share", "data-testid": `share-${slug}`, text: total ? (100 * weight / total).toFixed(1) + "%" : "–" }),
        el("td", {}, el("button", { type: "button", class: "link", text: "remove",
          onclick: () => { mix.delete(slug); renderMix(); renderList(); } })));
    });
    document.querySelector("#mix tbody").replaceChildren(...rows);
    form.dispatchEvent(new Event("mixchange")); // the estimate (run_estimate.js) follows the mix
  }

  function renderShares() {
    const total = [...mix.values()].reduce((a, b) => a + (b > 0 ? b : 0), 0);
    document.querySelectorAll("#mix tbody tr").forEach((tr) => {
      const w = mix.get(tr.dataset.slug);
      tr.querySelector(".share").textContent = total && w > 0 ? (100 * w / total).toFixed(1) + "%" : "–";
    });
  }

  search.addEventListener("input", renderList);
  kindSelect.addEventListener("change", renderList);

  // ------------------------------------------------------------------ trainer config from its schema
  // The schema is the trainer's (trainer/config.py) less the settings the run owns, with a run's
  // defaults: a setting added to the trainer's dataclasses appears here with no edit to this file.
  const sections = document.getElementById("config-sections");
  const schema = data.config_schema;

  function fieldInput(key, spec) { // key: "rollout.n", or "seed" for a top-level setting
    const path = `config.${key}`;
    const name = key.split(".").at(-1);
    const attrs = { name: path, "data-path": path, "data-testid": `cfg-${key.replaceAll(".", "-")}` };
    let input;
    if (spec.enum) {
      input = el("select", attrs, ...spec.enum.map((v) => el("option", { value: v, text: v })));
      input.value = spec.default;
    } else if (spec.type === "boolean") {
      input = el("input", { ...attrs, type: "checkbox" });
      input.checked = !!spec.default;
    } else if (spec.type === "integer" || spec.type === "number") {
      input = el("input", { ...attrs, type: "number", step: spec.type === "integer" ? "1" : "any", value: spec.default });
    } else {
      input = el("input", { ...attrs, value: spec.default ?? "" });
    }
    input.dataset.kind = spec.enum ? "enum" : spec.type;
    if (spec.enum) input.dataset.enum = JSON.stringify(spec.enum);
    input.dataset.default = JSON.stringify(spec.default ?? null);
    const help = (spec.description || "").replace(/``/g, "");
    const bounds = ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"].filter((k) => k in spec)
      .map((k) => `${{ minimum: "≥", exclusiveMinimum: ">", maximum: "≤", exclusiveMaximum: "<" }[k]} ${spec[k]}`).join(", ");
    return el("label", { class: "cfg-field" }, el("span", { class: "cfg-name", text: name }), input,
      el("small", { text: help + (bounds ? ` (${bounds})` : "") + ` Default: ${JSON.stringify(spec.default)}.` }),
      el("div", { class: "field-error", "data-path-error": path }));
  }

  function sectionBlock(key, title, description, fields) {
    return el("details", { class: "cfg-section", open: schema.open.includes(key) || undefined },
      el("summary", {}, el("b", { text: title }), " ", el("span", { class: "muted", text: description })),
      el("div", { class: "cfg-grid" }, ...fields),
      el("div", { class: "field-error", "data-path-error": key ? `config.${key}` : "config" }));
  }

  const topLevel = [];
  for (const key of schema.order) {
    const spec = schema.properties[key];
    if (!spec.properties) { topLevel.push(fieldInput(key, spec)); continue; }
    const fields = Object.entries(spec.properties).map(([name, f]) => fieldInput(`${key}.${name}`, f));
    sections.append(sectionBlock(key, key, spec.description || "", fields));
  }
  if (topLevel.length) sections.append(sectionBlock("", "general", "settings of the whole job", topLevel));

  // Settings of one rollout engine only (their help says which): shown, and sent, with that engine.
  function engineOf(input) {
    const help = input.closest("label")?.querySelector("small")?.textContent || "";
    if (/^vLLM:/.test(help)) return "vllm";
    if (/by the torch engine/.test(help)) return "torch";
    return "";
  }
  const engineSelect = sections.querySelector("[data-path='config.rollout.engine']");
  function showEngineFields() {
    const engine = engineSelect ? readValue(engineSelect) : "";
    sections.querySelectorAll("[data-path^='config.rollout.']").forEach((input) => {
      const only = engineOf(input);
      const label = input.closest("label");
      if (label && only) { label.hidden = only !== engine; label.dataset.engine = only; }
    });
  }
  if (engineSelect) engineSelect.addEventListener("change", showEngineFields);

  function readValue(input) {
    const kind = input.dataset.kind;
    if (kind === "boolean") return input.checked;
    if (kind === "enum") { // option values are strings; send the schema's own value (0, not "0")
      const match = JSON.parse(input.dataset.enum).find((v) => String(v) === input.value);
      return match === undefined ? input.value : match;
    }
    if (kind === "integer" || kind === "number") {
      if (input.value === "") return null;
      const n = Number(input.value);
      return Number.isNaN(n) ? input.value : n;
    }
    return input.value;
  }

  function configBody() {
    const config = {};
    sections.querySelectorAll("[data-path^='config.']").forEach((input) => {
      if (!input.dataset.kind) return;
      if (input.closest("label")?.hidden) return; // another engine's setting: not this run's
      const value = readValue(input);
      if (JSON.stringify(value) === input.dataset.default) return; // unchanged: the default applies
      const parts = input.dataset.path.split(".").slice(1);
      let node = config;
      for (const part of parts.slice(0, -1)) node = (node[part] ||= {});
      node[parts.at(-1)] = value;
    });
    return config;
  }

  // ------------------------------------------------------------------ the request body
  function value(name) { return form.querySelector(`[name="${name}"]`).value; }
  function optionalNumber(name) { const v = value(name); return v === "" ? null : Number(v); }

  // The run fields that fill trainer settings (staleness, budget.steps, ...): rendered by the
  // server from the trainer's run-owned list, each marked data-owned and named by its place in the body.
  const ownedInputs = () => [...form.querySelectorAll("[data-owned]")];
  function pathValue(obj, dotted) { return dotted.split(".").reduce((node, part) => (node == null ? undefined : node[part]), obj); }
  function putPath(obj, dotted, v) {
    const parts = dotted.split(".");
    let node = obj;
    for (const part of parts.slice(0, -1)) node = (node[part] ||= {});
    node[parts.at(-1)] = v;
  }
  function setInput(input, v) { if (input.type === "checkbox") input.checked = !!v; else input.value = v ?? ""; }

  function body() {
    const b = {
      team: data.team, name: value("name"), base_model: value("base_model"),
      domains: [...mix.entries()].map(([slug, weight]) => ({ slug, weight: Number.isNaN(weight) ? 0 : weight })),
      config: configBody(), priority: optionalNumber("priority"), gpus: optionalNumber("gpus"),
      budget: { tokens: optionalNumber("budget.tokens"), cost: value("budget.cost") || null }, // cost as text: exact
    };
    for (const input of ownedInputs()) putPath(b, input.name, readValue(input));
    if (cloneFrom) b.clone_from = cloneFrom;
    for (const k of Object.keys(b)) if (b[k] === null) delete b[k]; // a blank run field: its default
    return b;
  }

  // ------------------------------------------------------------------ errors beside their fields
  function clearErrors() {
    form.querySelectorAll(".invalid").forEach((n) => n.classList.remove("invalid"));
    form.querySelectorAll("[data-path-error]").forEach((n) => { n.textContent = ""; });
    const box = document.getElementById("form-errors");
    box.replaceChildren();
    box.hidden = true;
  }

  function showErrors(err) {
    clearErrors();
    const box = document.getElementById("form-errors");
    const errors = err.errors && err.errors.length ? err.errors : [{ path: "", message: err.detail || "request failed" }];
    for (const e of errors) {
      const input = e.path ? form.querySelector(`:is(input, select, textarea)[data-path="${CSS.escape(e.path)}"]`) : null;
      let slot = e.path ? form.querySelector(`[data-path-error="${CSS.escape(e.path)}"]`) : null;
      if (input) input.classList.add("invalid");
      if (!slot && input) slot = input.closest("label")?.querySelector(".field-error");
      if (!slot && e.path) { // nearest enclosing path that has a slot, e.g. config.algorithm
        const parts = e.path.split(".");
        while (parts.length > 1 && !slot) { parts.pop(); slot = form.querySelector(`[data-path-error="${CSS.escape(parts.join("."))}"]`); }
      }
      if (slot) {
        slot.textContent = (slot.textContent ? slot.textContent + "; " : "") + `${e.path}: ${e.message}`;
      }
      box.append(el("li", { "data-path": e.path, text: e.path ? `${e.path}: ${e.message}` : e.message }));
    }
    box.hidden = false;
    (form.querySelector(".invalid") || box).scrollIntoView({ block: "center" });
  }

  // ------------------------------------------------------------------ actions
  const plan = document.getElementById("plan");
  document.getElementById("validate").addEventListener("click", async () => {
    plan.textContent = "validating…";
    try {
      const result = await api("POST", "/api/runs/validate", body());
      clearErrors();
      plan.textContent = "Valid · " + result.domains.map((d) => `${d.slug} v${d.version} ${(100 * d.share).toFixed(1)}%`).join(", ");
      plan.dataset.state = "valid";
    } catch (err) {
      plan.textContent = `${err.errors?.length || 1} problem(s)`;
      plan.dataset.state = "invalid";
      showErrors(err);
    }
  });

  async function create(start) {
    plan.textContent = "creating…";
    try {
      const run = await api("POST", "/api/runs", body());
      if (start) await api("POST", `/api/runs/${run.id}/start`);
      location.assign(`/runs/${run.id}/`);
    } catch (err) {
      plan.textContent = "not saved";
      plan.dataset.state = "invalid";
      showErrors(err);
    }
  }
  document.getElementById("create").addEventListener("click", () => create(false));
  document.getElementById("create-start").addEventListener("click", () => create(true));

  // ------------------------------------------------------------------ clone from run
  let cloneFrom = null;
  document.getElementById("clone-from").addEventListener("change", (e) => {
    if (e.target.value) location.assign(`/runs/new/?clone=${e.target.value}`);
  });

  // ------------------------------------------------------------------ what differs from the defaults or the clone
  // A setting changed from its default is marked `changed` (with the default in its tooltip); on a
  // clone, a field that differs from the source run is marked `changed-from-clone`. Each config
  // section's summary counts its changed settings.
  function markChanged() {
    sections.querySelectorAll("[data-path^='config.']").forEach((input) => {
      if (!input.dataset.kind) return;
      const now = JSON.stringify(readValue(input));
      const changed = now !== input.dataset.default && !(now === '""' && input.dataset.default === "null");
      input.classList.toggle("changed", changed);
      input.title = changed ? `default: ${input.dataset.default}` : "";
      const source = input.dataset.cloned ?? input.dataset.default;
      input.classList.toggle("changed-from-clone", cloneFrom !== null && now !== source);
    });
    form.querySelectorAll("[data-cloned]:not([data-path^='config.'])").forEach((input) => { // the run's own fields
      const now = input.type === "checkbox" ? String(input.checked) : input.value;
      input.classList.toggle("changed-from-clone", cloneFrom !== null && now !== input.dataset.cloned);
    });
    sections.querySelectorAll("details.cfg-section").forEach((block) => {
      const n = block.querySelectorAll(".changed").length;
      let badge = block.querySelector("summary .changed-count");
      if (!badge) { badge = el("span", { class: "changed-count muted" }); block.querySelector("summary").append(" ", badge); }
      badge.textContent = n ? `(${n} changed)` : "";
    });
  }
  form.addEventListener("input", markChanged);
  form.addEventListener("change", markChanged);

  function prefill(c) {
    cloneFrom = c.clone_from;
    document.getElementById("clone-from").value = String(c.clone_from);
    const set = (name, v) => {
      const i = form.querySelector(`[name="${name}"]`);
      if (i && v !== null && v !== undefined) { setInput(i, v); i.dataset.cloned = String(v); }
    };
    set("name", c.name); set("base_model", c.base_model); set("priority", c.priority); set("gpus", c.gpus);
    set("budget.tokens", c.budget.tokens); set("budget.cost", c.budget.cost);
    for (const input of ownedInputs()) set(input.name, pathValue(c, input.name));
    c.domains.forEach((d) => mix.set(d.slug, d.weight));
    prefillConfig(c.config || {}, "config");
  }

  function prefillConfig(values, prefix) {
    for (const [name, v] of Object.entries(values)) {
      const path = `${prefix}.${name}`;
      if (v && typeof v === "object" && !Array.isArray(v)) { prefillConfig(v, path); continue; }
      // the setting's own input: an error listed for the same path carries data-path too
      const input = sections.querySelector(`[data-path="${CSS.escape(path)}"][data-kind]`);
      if (!input) continue; // e.g. a setting the run now owns: its own field carries it
      if (input.dataset.kind === "boolean") input.checked = !!v; else input.value = v;
      input.dataset.cloned = JSON.stringify(readValue(input));
    }
  }

  // ------------------------------------------------------------------ the whole run as text
  // The request body as JSON or YAML: copy it, or paste or edit one and apply it to the form,
  // which validates it at once with the server's errors beside their fields (the same as
  // Validate). YAML is read and written by the server (POST /api/runs/yaml/parse and /dump), with
  // JSON's values only; a text that does not parse says where, and the form keeps its values.
  const jsonBox = document.getElementById("run-json");
  const textBox = document.getElementById("json-text");
  const textFormat = document.getElementById("text-format");
  const textError = document.getElementById("json-error");
  let shownFormat = "json";

  async function showText() { // the form's body in the chosen format
    textError.textContent = "";
    if (textFormat.value === "yaml") {
      try { textBox.value = (await api("POST", "/api/runs/yaml/dump", { body: body() })).text; }
      catch (err) { textFormat.value = shownFormat; textError.textContent = `YAML: ${err.detail}`; return; }
    } else {
      textBox.value = JSON.stringify(body(), null, 2);
    }
    shownFormat = textFormat.value;
  }

  async function parseText() { // the text's body, or null with the reason shown
    const text = textBox.value;
    if (shownFormat === "yaml") {
      try { return (await api("POST", "/api/runs/yaml/parse", { text })).body; }
      catch (err) {
        const where = (err.errors || []).map((e) => e.message).join("; ");
        textError.textContent = where || `not YAML: ${err.detail}`;
        return null;
      }
    }
    let parsed;
    try { parsed = JSON.parse(text); }
    catch (e) { textError.textContent = `not JSON: ${e.message}`; return null; }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) { textError.textContent = "not JSON: expected an object"; return null; }
    return parsed;
  }

  document.getElementById("json-show").addEventListener("click", () => { jsonBox.hidden = false; showText(); });
  document.getElementById("json-hide").addEventListener("click", () => { jsonBox.hidden = true; });
  textFormat.addEventListener("change", async () => {
    // switching keeps what was typed: the text is read in its old format, then written in the new
    const from = shownFormat, to = textFormat.value;
    textFormat.value = from;
    const parsed = await parseText();
    if (parsed === null) return;
    textError.textContent = "";
    if (to === "yaml") {
      try { textBox.value = (await api("POST", "/api/runs/yaml/dump", { body: parsed })).text; }
      catch (err) { textError.textContent = `YAML: ${err.detail}`; return; }
    } else {
      textBox.value = JSON.stringify(parsed, null, 2);
    }
    textFormat.value = to;
    shownFormat = to;
  });
  document.getElementById("json-apply").addEventListener("click", async () => {
    const parsed = await parseText();
    if (parsed === null) return;
    textError.textContent = "";
    applyBody(parsed);
    document.getElementById("validate").click();
  });

  function applyBody(b) {
    const set = (name, v) => { const i = form.querySelector(`[name="${name}"]`); if (i) i.value = v ?? ""; };
    set("name", b.name); set("base_model", b.base_model); set("priority", b.priority ?? 50); set("gpus", b.gpus ?? 0);
    set("budget.tokens", (b.budget || {}).tokens); set("budget.cost", (b.budget || {}).cost);
    for (const input of ownedInputs()) { // a field of the run itself left out keeps the form's value
      const v = pathValue(b, input.name);
      if (v !== undefined || input.name.includes(".")) setInput(input, v);
    }
    mix.clear();
    for (const d of Array.isArray(b.domains) ? b.domains : []) if (d && d.slug) mix.set(d.slug, Number(d.weight ?? 1));
    sections.querySelectorAll("[data-path^='config.']").forEach((input) => { // back to the defaults, then the body's
      if (!input.dataset.kind) return;
      const d = JSON.parse(input.dataset.default);
      if (input.dataset.kind === "boolean") input.checked = !!d; else input.value = d ?? "";
    });
    prefillConfig(b.config && typeof b.config === "object" ? b.config : {}, "config");
    showEngineFields();
    renderList(); renderMix(); markChanged();
  }

  if (data.clone) prefill(data.clone);
  else if (data.models.length) form.querySelector('[name="base_model"]').value = data.models[0].path;
  showEngineFields();
  renderList();
  renderMix();
  markChanged();
  window.TemperRunForm = { body, mix, fmt, applyBody };
})();
