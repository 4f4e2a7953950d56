// The suppliers (#/suppliers): one row per node with GPUs, with its
// standing (reputation, verification, uptime) and its last verdict.

import { paths, type SupplierRow } from "../api";
import { ago, badge, h, num, pct, peer, price, table, verdict, type Column } from "../dom";
import { Slot, list, type Ctx, type View } from "./view";

export function suppliers(): View {
  const rows = new Slot({ id: "suppliers" });
  let filter = "";
  let last: SupplierRow[] | undefined;
  let now = Date.now();
  const draw = () => {
    if (last) rows.show(`${filter}\n${JSON.stringify(last)}`, now, () => supplierTable(match(last!, filter), now, filter ? "No supplier matches the filter." : "No suppliers yet: no node with GPUs has been heard from."));
  };
  const input = h("input", {
    type: "search",
    placeholder: "Filter by peer, region, model, software…",
    "aria-label": "Filter suppliers",
    oninput: (e: Event) => {
      filter = (e.target as HTMLInputElement).value.trim().toLowerCase();
      draw();
    },
  });
  const count = h("span", { class: "muted" });
  const el = h(
    "section",
    { "data-page": "suppliers" },
    h("h1", null, "Suppliers"),
    h("div", { class: "toolbar" }, input, count),
    rows.el,
  );
  return {
    el,
    async refresh(ctx: Ctx) {
      const a = await ctx.get<SupplierRow[]>(paths.suppliers);
      now = ctx.now;
      if (!a.data) {
        last = undefined;
        rows.answer(a, ctx.now, () => null);
        return;
      }
      last = list(a.data);
      const verified = last.filter((s) => s.verified).length;
      count.textContent = `${last.length} suppliers, ${verified} verified`;
      draw();
    },
  };
}

function match(rows: SupplierRow[], filter: string): SupplierRow[] {
  if (!filter) return rows;
  return rows.filter((s) =>
    [s.peer_id, s.region, s.software, ...list(s.models).map((m) => m.model)].some((v) => v && v.toLowerCase().includes(filter)),
  );
}

/** standing shows whether a supplier is verified. */
export function standing(s: SupplierRow): HTMLElement {
  if (s.verified) return badge("ok", "✓ verified", "passed challenges of enough trusted challengers");
  if (s.last_verdict && !s.last_verdict.passed) return badge("bad", "failed");
  return badge("plain", "unproven", "no trusted challenger has proven its GPUs yet");
}

function supplierTable(rows: SupplierRow[], now: number, empty: string): HTMLElement {
  const cols: Column<SupplierRow>[] = [
    { head: "Supplier", cell: (s) => peer(s.peer_id) },
    { head: "Region", cell: (s) => s.region || "–" },
    { head: "GPUs free / total", num: true, cell: (s) => `${num(s.gpus_free)} / ${num(s.gpus_total)}` },
    { head: "Models", cell: (s) => list(s.models).map((m) => `${m.count}× ${m.model}`).join(", ") || "–" },
    { head: "Asks", num: true, cell: (s) => num(s.asks) },
    { head: "Cheapest", num: true, cell: (s) => price(s.cheapest_micros) },
    { head: "Reputation", num: true, cell: (s) => num(s.reputation, 2) },
    { head: "Status", cell: (s) => (s.simulated ? [standing(s), " ", badge("warn", "simulated GPUs", "its GPUs are simulated (--gpus sim:...): no hardware stands behind them, and a pass proves none")] : standing(s)) },
    {
      head: "Last verdict",
      wrap: true,
      cell: (s) => (s.last_verdict ? [verdict(s.last_verdict.passed, s.last_verdict.reason), " ", h("span", { class: "muted small" }, s.last_verdict.model)] : h("span", { class: "muted" }, "never challenged")),
    },
    { head: "Uptime", num: true, cell: (s) => pct(s.uptime_pct) },
    { head: "Leases served", num: true, cell: (s) => num(s.leases_served) },
    { head: "GPU-hours", num: true, cell: (s) => num(s.gpu_hours_served, 1) },
    { head: "Last seen", cell: (s) => ago(s.last_seen, now) },
    { head: "Connection", cell: (s) => (s.connected ? badge("ok", "connected") : badge("plain", "not connected")) },
    { head: "Software", cell: (s) => s.software || "–" },
  ];
  return table(cols, rows, empty, (s) => ({
    "data-peer": s.peer_id,
    class: s.last_verdict && !s.last_verdict.passed ? "failed" : null,
  }));
}
