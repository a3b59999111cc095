// Alert rules: create and edit (POST/PATCH /api/alerts/rules), test delivery, delete, and
// notifications marked read. The form's fields map onto the API's rule body; errors come back
// with their field paths and are shown all at once.
"use strict";

(() => {
  const list = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

  function fill(form, rule) {
    form.name.value = rule.name;
    form.condition.value = rule.condition;
    form.metric.value = rule.metric || "";
    form.threshold.value = rule.threshold;
    form.window.value = rule.window;
    form.events.value = (rule.events || []).join(", ");
    form.advice.value = rule.advice || "";
    form.enabled.checked = rule.enabled;
    const by = (t) => rule.channels.filter((c) => c.type === t);
    form.in_app.checked = by("in_app").length > 0;
    form.webhook_url.value = (by("webhook")[0] || {}).url || "";
    form.slack_url.value = (by("slack")[0] || {}).url || "";
    form.email_to.value = ((by("email")[0] || {}).to || []).join(", ");
  }

  function body(form) {
    const channels = [];
    if (form.in_app.checked) channels.push({ type: "in_app" });
    if (form.webhook_url.value.trim()) {
      const ch = { type: "webhook", url: form.webhook_url.value.trim() };
      if (form.webhook_secret.value) ch.secret = form.webhook_secret.value;
      channels.push(ch);
    }
    if (form.slack_url.value.trim()) channels.push({ type: "slack", url: form.slack_url.value.trim() });
    if (form.email_to.value.trim()) channels.push({ type: "email", to: list(form.email_to.value) });
    const out = { name: form.name.value, condition: form.condition.value, threshold: Number(form.threshold.value),
                  window: Number(form.window.value), channels, advice: form.advice.value.trim(), enabled: form.enabled.checked };
    if (form.metric.value.trim() || ["drop", "above", "below"].includes(out.condition)) out.metric = form.metric.value.trim();
    if (form.events.value.trim() || out.condition === "event") out.events = list(form.events.value);
    return out;
  }

  for (const form of document.querySelectorAll("form.alert-form")) {
    const rule = form.dataset.rule ? JSON.parse(form.dataset.rule) : null;
    if (rule) fill(form, rule);
    const out = form.nextElementSibling;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      out.textContent = "";
      const data = body(form);
      try {
        if (rule) {
          await Temper.api("PATCH", `/api/alerts/rules/${rule.id}`, data);
          location.reload();
        } else {
          const created = await Temper.api("POST", "/api/alerts/rules", { team: form.dataset.team, ...data });
          location.assign(`/alerts/rules/${created.id}/`);
        }
      } catch (err) {
        out.textContent = (err.errors || []).map((x) => `${x.path}: ${x.message}`).join("; ") || err.detail;
      }
    });
  }

  const result = document.querySelector("[data-testid=test-result]");
  for (const button of document.querySelectorAll("[data-test-rule]")) {
    button.addEventListener("click", async () => {
      result.textContent = "sending...";
      try {
        const deliveries = await Temper.api("POST", `/api/alerts/rules/${button.dataset.testRule}/test`);
        result.textContent = deliveries.length
          ? deliveries.map((d) => `${d.channel} ${d.target}: ${d.status}${d.last_code ? ` (HTTP ${d.last_code})` : ""}${d.last_error ? ` ${d.last_error}` : ""}`).join("; ")
          : "sent to your notifications (the rule has no other channel)";
      } catch (err) {
        result.textContent = err.detail;
      }
    });
  }

  for (const button of document.querySelectorAll("[data-delete-rule]")) {
    button.addEventListener("click", async () => {
      if (!confirm("Delete this rule, its firings and its delivery log?")) return;
      try {
        await Temper.api("DELETE", `/api/alerts/rules/${button.dataset.deleteRule}`);
        location.assign("/alerts/");
      } catch (err) {
        result.textContent = err.detail;
      }
    });
  }

  // A default rule adjusted for the team: the create form filled with its values (same name, so
  // once saved it replaces the default for the team's runs), to change and save.
  const createForm = document.querySelector("[data-testid=rule-create] form.alert-form");
  for (const button of document.querySelectorAll("[data-copy-rule]")) {
    button.addEventListener("click", () => {
      if (!createForm) return;
      fill(createForm, JSON.parse(button.dataset.copyRule));
      createForm.scrollIntoView({ block: "center" });
      createForm.threshold.focus();
    });
  }

  const markAll = document.querySelector("[data-mark-all]");
  if (markAll) {
    markAll.addEventListener("click", async () => {
      await Temper.api("POST", "/api/notifications/read", {});
      location.reload();
    });
  }
})();
