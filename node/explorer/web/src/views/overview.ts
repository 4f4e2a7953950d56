// The overview (#/): the network in numbers, by model and by region, and
// the latest trade prints.

import { paths, type ModelSummary, type RegionSummary, type Summary, type Trade } from "../api";
import { ago, card, h, micros, num, peer, price, route, sig, table, type Column } from "../dom";
import { Slot, list, type Ctx, type View } from "./view";

const recentTrades = 12;

export function overview(): View {
  const cards = new Slot({ id: "summary" });
  const models = new Slot({ id: "models" });
  const regions = new Slot({ id: "regions" });
  const trades = new Slot({ id: "recent-trades" });
  const el = h(
    "section",
    { "data-page": "overview" },
    h("h1", null, "Network overview"),
    cards.el,
    h("h2", null, "GPU models"),
    models.el,
    h("h2", null, "Regions"),
    regions.el,
    h("h2", null, "Latest trades"),
    trades.el,
  );
  return {
    el,
    async refresh(ctx: Ctx) {
      const [summary, tradesAnswer] = await Promise.all([ctx.summary, ctx.get<Trade[]>(paths.trades())]);
      cards.answer(summary, ctx.now, summaryCards);
      // the summary's time changes on every poll; the tables do not need it
      const s = summary.data;
      if (s) {
        models.show(JSON.stringify(s.models), ctx.now, () => modelTable(list(s.models)));
        regions.show(JSON.stringify(s.regions), ctx.now, () => regionTable(list(s.regions)));
      }
      trades.answer(tradesAnswer, ctx.now, (all) => tradeTable(list(all).slice(-recentTrades).reverse(), ctx.now));
    },
  };
}

function summaryCards(s: Summary): HTMLElement {
  const leasedShare = s.gpus.total > 0 ? (100 * s.gpus.leased) / s.gpus.total : 0;
  const meter = h("div", { class: "meter", title: `${num(leasedShare, 1)}% leased` }, h("div"));
  (meter.firstChild as HTMLElement).style.width = `${leasedShare}%`;
  return h(
    "div",
    { class: "cards" },
    card("Nodes", num(s.nodes), "heard from in the last 10 min", { "data-stat": "nodes" }),
    card("Suppliers", num(s.suppliers), "nodes with GPUs", { "data-stat": "suppliers" }),
    card("GPUs", num(s.gpus.total), [`${num(s.gpus.free)} free · ${num(s.gpus.leased)} leased`, meter], { "data-stat": "gpus" }),
    card("Regions", num(list(s.regions).length), null, { "data-stat": "regions" }),
    card("Order book", `${num(s.asks)} / ${num(s.bids)}`, "asks / bids", { "data-stat": "book" }),
    card("Trades", num(s.trades), "trade prints held", { "data-stat": "trades" }),
    card("Verified suppliers", num(s.verified_suppliers), `of ${num(s.suppliers)}`, { "data-stat": "verified" }),
    card("Attestations", num(s.attestations), "challenge and uptime verdicts", { "data-stat": "attestations" }),
  );
}

function modelTable(rows: ModelSummary[]): HTMLElement {
  const cols: Column<ModelSummary>[] = [
    { head: "Model", cell: (m) => h("a", { href: route("gpus") }, m.model) },
    { head: "Suppliers", num: true, cell: (m) => num(m.suppliers) },
    { head: "GPUs", num: true, cell: (m) => num(m.gpus) },
    { head: "Asks", num: true, cell: (m) => num(m.asks) },
    { head: "Cheapest ask", num: true, cell: (m) => price(m.cheapest_micros) },
    { head: "Trades", num: true, cell: (m) => num(m.trades) },
    { head: "Last trade", num: true, cell: (m) => price(m.last_micros) },
    { head: "VWAP", num: true, cell: (m) => price(m.vwap_micros) },
  ];
  return table(cols, rows, "No GPU models on offer yet.", (m) => ({ "data-model": m.model }));
}

function regionTable(rows: RegionSummary[]): HTMLElement {
  const cols: Column<RegionSummary>[] = [
    { head: "Region", cell: (r) => r.region || "(none given)" },
    { head: "Suppliers", num: true, cell: (r) => num(r.suppliers) },
    { head: "GPUs", num: true, cell: (r) => num(r.gpus) },
  ];
  return table(cols, rows, "No regions yet.", (r) => ({ "data-region": r.region }));
}

/** tradeTable lists trade prints; the GPU and supplier pages use it too. */
export function tradeTable(rows: Trade[], now: number, withSupplier = true): HTMLElement {
  const cols: Column<Trade>[] = [
    { head: "When", cell: (t) => ago(t.time, now) },
    { head: "Model", cell: (t) => t.model },
    { head: "GPUs", num: true, cell: (t) => num(t.count) },
    { head: "Price", num: true, cell: (t) => `${t.price || micros(t.price_micros)}/GPU·h` },
    { head: "GPU-hours", num: true, cell: (t) => num(t.gpu_hours, 2) },
    ...(withSupplier ? [{ head: "Supplier", cell: (t: Trade) => peer(t.supplier) }] : []),
    { head: "Signature", cell: (t) => sig(t.signature_ok) },
  ];
  return table(cols, rows, "No trade prints yet.", (t) => ({ "data-trade": t.id }));
}
