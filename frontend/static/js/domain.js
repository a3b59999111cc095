// Domain page: the diff between two versions, the quota form for those who may edit it
// (PATCH /api/domains/<slug>: a new version, audited; errors shown beside their fields), and the
// verifier audit: "Audit again" and the override form for admins, and a watch on an audit that is
// waiting or running (the page reloads when its result is in).
"use strict";

(() => {
  const { el, api } = Temper;
  const page = Temper.pageData("page-data");

  const diffForm = document.getElementById("diff-form");
  if (diffForm) {
    const show = async (e) => {
      e && e.preventDefault();
      const a = diffForm.a.value, b = diffForm.b.value;
      const diff = await api("GET", `/api/domains/${page.slug}/diff?a=${a}&b=${b}`);
      const rows = diff.changes.map((c) => el("tr", {}, el("td", {}, el("code", { text: c.path })),
        el("td", { class: "before", text: JSON.stringify(c.before) }), el("td", { class: "after", text: JSON.stringify(c.after) })));
      document.querySelector("#diff tbody").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { text: "no differences" }))]));
    };
    diffForm.addEventListener("submit", show);
    show();
  }

  // The last hour's verification latency and outcome mix, refreshed while the page is open.
  async function refreshStats() {
    const s = await api("GET", `/api/domains/${page.slug}/stats`);
    const secs = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(3)} s`);
    document.getElementById("stat-p50").textContent = secs(s.p50_s);
    document.getElementById("stat-p99").textContent = secs(s.p99_s);
    document.getElementById("stat-total").textContent = `${s.total} in ${s.runs} run(s)`;
    document.getElementById("stat-mix").replaceChildren(...s.outcomes.map((o) =>
      el("span", { class: `outcome ${o.outcome}`, style: `flex: ${o.count}`, title: `${o.outcome}: ${o.count}`, text: `${o.outcome} ${o.count}` })));
    document.getElementById("stat-none").hidden = s.outcomes.length > 0;
  }
  setInterval(() => refreshStats().catch(() => {}), 5000);

  const form = document.getElementById("quota-form");
  if (form) {
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      form.querySelectorAll("[data-path-error]").forEach((n) => { n.textContent = ""; });
      const body = {};
      for (const name of ["priority", "max_concurrent_sandboxes"]) body[name] = parseInt(form[name].value, 10);
      for (const name of ["max_share", "task_timeout_s"]) body[name] = Number(form[name].value);
      if (form.note.value) body.note = form.note.value;
      try {
        const d = await api("PATCH", `/api/domains/${page.slug}`, body);
        document.getElementById("quota-saved").textContent = `saved as v${d.version}`;
        setTimeout(() => location.reload(), 600);
      } catch (err) {
        for (const x of err.errors || []) {
          const slot = form.querySelector(`[data-path-error="${x.path}"]`);
          if (slot) slot.textContent = x.message; else Temper.flash(`${x.path}: ${x.message}`);
        }
        if (!(err.errors || []).length) Temper.flash(err.detail);
      }
    });
  }

  // ------------------------------------------------------------------ the verifier audit
  // The badge in the header opens the probe classes and their failing examples.
  const badge = document.querySelector("[data-testid=audit-badge]");
  const details = document.getElementById("audit-details");
  if (badge && details) badge.addEventListener("click", () => { details.open = true; });
  const rerun = document.getElementById("audit-rerun");
  if (rerun) {
    rerun.addEventListener("click", async () => {
      rerun.disabled = true;
      try {
        await api("POST", `/api/domains/${page.slug}/audit`, { note: "re-run from the domain page" });
        location.reload();
      } catch (err) {
        rerun.disabled = false;
        Temper.flash(err.detail || "the audit could not be requested");
      }
    });
  }

  const override = document.getElementById("audit-override");
  if (override) {
    override.addEventListener("submit", async (e) => {
      e.preventDefault();
      override.querySelectorAll("[data-path-error]").forEach((n) => { n.textContent = ""; });
      try {
        await api("POST", `/api/domains/${page.slug}/audit/override`, { reason: override.reason.value });
        location.reload();
      } catch (err) {
        for (const x of err.errors || []) {
          const slot = override.querySelector(`[data-path-error="${x.path}"]`);
          if (slot) slot.textContent = x.message; else Temper.flash(`${x.path}: ${x.message}`);
        }
        if (!(err.errors || []).length) Temper.flash(err.detail);
      }
    });
  }

  // An audit waiting or running: show its progress, and reload once it has finished.
  if (page.audit && page.audit.watch) {
    const timer = setInterval(async () => {
      try {
        const view = await api("GET", `/api/domains/${page.slug}/audit`);
        const bar = document.getElementById("audit-progress");
        if (view.open && bar && view.open.total) { bar.max = view.open.total; bar.value = view.open.done; }
        if (!view.open) { clearInterval(timer); location.reload(); }
      } catch (err) { /* the next tick tries again */ }
    }, 3000);
  }
})();
