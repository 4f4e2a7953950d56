// One supplier (#/supplier/<peer>): what it sells, how it was verified
// (every verdict with its reason), its uptime over 30 days, its
// reputation and who vouched for it, and the leases it served.

import { paths, type Attestation, type Reputation, type SupplierDetail, type UptimeDay } from "../api";
import { TimeChart } from "../chart";
import { ago, badge, h, num, pct, peer, price, route, shortID, sig, table, verdict, when, type Child, type Column } from "../dom";
import { askTable } from "./book";
import { tradeTable } from "./overview";
import { standing } from "./suppliers";
import { Slot, failure, list, type Ctx, type View } from "./view";

export function supplier(id: string): View {
  const head = new Slot({ id: "supplier-head" });
  const facts = new Slot({ id: "supplier-facts" });
  const rep = new Slot({ id: "reputation" });
  const models = new Slot({ id: "inventory" });
  const asks = new Slot({ id: "supplier-asks" });
  const challenges = new Slot({ id: "verdicts" });
  const uptimeChecks = new Slot({ id: "uptime-checks" });
  const trades = new Slot({ id: "served" });
  const uptime = new TimeChart({ label: "uptime", kind: "bars", fmt: (v) => `${Math.round(v)}%`, yRange: [0, 100], empty: "No uptime checks in the last 30 days.", height: 170 });
  const body = h(
    "div",
    null,
    facts.el,
    h("h2", null, "Reputation"),
    rep.el,
    h("h2", null, "Inventory"),
    models.el,
    h("h2", null, "Asks"),
    asks.el,
    h("h2", null, "Verification history"),
    h("p", { class: "muted small" }, "Challenges: a challenger times a chain of exact matrix products and a memory proof on the GPUs the supplier claims, checks random rows, and signs its verdict."),
    challenges.el,
    h("h2", null, "Uptime, last 30 days"),
    h("div", { class: "panel", id: "uptime" }, uptime.el),
    uptimeChecks.el,
    h("h2", null, "Leases served"),
    trades.el,
  );
  const el = h(
    "section",
    { "data-page": "supplier", "data-peer": id },
    h("p", { class: "small" }, h("a", { href: route("suppliers") }, "← all suppliers")),
    h("h1", null, "Supplier ", h("span", { class: "peer" }, id)),
    head.el,
    body,
  );
  return {
    el,
    async refresh(ctx: Ctx) {
      const a = await ctx.get<SupplierDetail>(paths.supplier(id));
      if (!a.data) {
        body.hidden = true;
        head.show(`${a.status}${a.text}`, ctx.now, () =>
          a.status === 404 ? h("div", { class: "alert info" }, "This node knows no supplier with this peer ID: it has heard no heartbeat, ask or verdict of it.") : failure(a),
        );
        return;
      }
      body.hidden = false;
      const d = a.data;
      const s = d.supplier;
      const now = ctx.now;
      const atts = list(d.attestations);
      head.show(JSON.stringify([s.verified, s.last_verdict]), now, () => headline(d));
      facts.show(JSON.stringify(s), now, () =>
        dl([
          ["Region", s.region || "–"],
          ["Software", s.software || "–"],
          ["GPUs free / total", `${num(s.gpus_free)} / ${num(s.gpus_total)}`],
          ["Live asks", num(s.asks)],
          ["Cheapest ask", price(s.cheapest_micros)],
          ["Status", standing(s)],
          ["Uptime", pct(s.uptime_pct)],
          ["Last seen", ago(s.last_seen, now)],
          ["Link to this node", s.connected ? badge("ok", "connected") : badge("plain", "not connected")],
          ["Leases served", num(s.leases_served)],
          ["GPU-hours served", num(s.gpu_hours_served, 2)],
        ]),
      );
      rep.show(JSON.stringify([d.reputation, d.vouched_by]), now, () => reputation(d.reputation, list(d.vouched_by)));
      models.show(JSON.stringify(s.models), now, () =>
        table([{ head: "Model", cell: (m) => m.model }, { head: "GPUs", num: true, cell: (m) => num(m.count) }], list(s.models), "No GPUs on offer (no live ask).", (m) => ({ "data-model": m.model })),
      );
      asks.show(JSON.stringify(d.asks), now, () => askTable(list(d.asks), now, false));
      challenges.show(JSON.stringify(atts.filter((t) => t.kind !== "uptime")), now, () => attestationTable(atts.filter((t) => t.kind !== "uptime"), now, "Never challenged."));
      const days = list(d.uptime);
      uptime.set(
        days.map((u) => Date.parse(`${u.day}T00:00:00Z`) / 1000),
        days.map((u) => (u.checks > 0 ? u.pct : null)),
      );
      const pings = atts.filter((t) => t.kind === "uptime");
      uptimeChecks.show(JSON.stringify([pings, days]), now, () => uptimeDetails(pings, days, now));
      trades.show(JSON.stringify(d.trades), now, () => tradeTable(list(d.trades), now, false));
    },
    destroy() {
      uptime.destroy();
    },
  };
}

/** headline says at a glance where the supplier stands; a failed
 *  challenge is shown with its reason. */
function headline(d: SupplierDetail): HTMLElement {
  const v = d.supplier.last_verdict;
  if (v && !v.passed) {
    return h(
      "div",
      { class: "alert bad", id: "failed" },
      h("strong", null, `✗ Failed a challenge${v.model ? ` (${v.model})` : ""}: `),
      h("span", { class: "reason" }, v.reason || "no reason given"),
      h("div", { class: "small" }, "Challenged by ", peer(v.challenger), ` at ${when(v.time)}.`),
    );
  }
  if (d.supplier.verified) return h("div", { class: "alert ok" }, "✓ Verified: trusted challengers proved the GPUs it claims.");
  if (v) return h("div", { class: "alert info" }, "Passed its last challenge, but not yet proven by enough trusted challengers to count as verified.");
  return h("div", { class: "alert info" }, "Never challenged: nobody has proven the GPUs it claims.");
}

function reputation(r: Reputation, vouchers: string[]): Child {
  return [
    dl([
      ["Reputation", h("span", { "data-reputation": r.reputation }, num(r.reputation, 2))],
      ["Verified", r.verified ? badge("ok", "yes") : badge("plain", "no")],
      ["Challenges passed / failed", `${num(r.passes)} / ${num(r.fails)}`],
      ["Challengers", num(r.challengers)],
      ["Uptime (from pings)", `${num(r.uptime * 100, 1)}% of ${num(r.pings)}`],
      ["Last challenge", r.last_challenge ? ago(r.last_challenge) : "–"],
      ["Conflicting verdicts", r.conflict ? badge("warn", "yes") : "no"],
      ["Its trust as a challenger", num(r.trust, 2)],
    ]),
    h("h3", { class: "vouch" }, "Vouched for by"),
    vouchers.length === 0
      ? h("p", { class: "muted", id: "vouched-by" }, "Nobody: no challenger's latest challenge of it passed.")
      : h("ul", { id: "vouched-by" }, vouchers.map((v) => h("li", null, peer(v)))),
  ];
}

function attestationTable(rows: Attestation[], now: number, empty: string): HTMLElement {
  const cols: Column<Attestation>[] = [
    { head: "When", cell: (t) => ago(t.time, now) },
    { head: "Kind", cell: (t) => t.kind },
    { head: "Model", cell: (t) => t.model || "–" },
    { head: "Verdict", wrap: true, cell: (t) => verdict(t.passed, t.reason) },
    { head: "GPUs", num: true, cell: (t) => num(t.gpus) },
    // milli_ops are thousandths of GOPS
    { head: "Throughput measured / needed", num: true, cell: (t) => (t.expected_milli_ops ? `${num(t.measured_milli_ops / 1000, 1)} / ${num(t.expected_milli_ops / 1000, 1)} GOPS` : "–") },
    { head: "Challenger", cell: (t) => peer(t.challenger) },
    { head: "ID", cell: (t) => shortID(t.id) },
    { head: "Signature", cell: (t) => sig(t.signature_ok) },
  ];
  return table(cols, rows, empty, (t) => ({ "data-attestation": t.id, class: t.passed ? null : "failed" }));
}

function uptimeDetails(pings: Attestation[], days: UptimeDay[], now: number): Child {
  const checks = days.reduce((n, d) => n + d.checks, 0);
  const passed = days.reduce((n, d) => n + d.passed, 0);
  return h(
    "details",
    null,
    h("summary", null, `${num(passed)} of ${num(checks)} uptime checks answered in 30 days; the latest ${num(pings.length)} signed checks`),
    attestationTable(pings, now, "No uptime checks."),
  );
}

function dl(rows: [string, Child][]): HTMLElement {
  return h("dl", { class: "facts" }, rows.map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
}
