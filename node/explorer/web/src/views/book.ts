// The order book (#/book): every live ask and bid this node holds.

import { paths, type Book, type OrderView } from "../api";
import { ago, badge, h, num, peer, price, relative, shortID, sig, table, type Column } from "../dom";
import { Slot, list, type Ctx, type View } from "./view";

export function book(): View {
  const asks = new Slot({ id: "asks" });
  const bids = new Slot({ id: "bids" });
  const el = h(
    "section",
    { "data-page": "book" },
    h("h1", null, "Order book"),
    h("p", { class: "muted" }, "Asks are suppliers' signed offers to sell; bids are renters' signed offers to buy. Both are gossiped and expire on their own."),
    h("h2", null, "Asks"),
    asks.el,
    h("h2", null, "Bids"),
    bids.el,
  );
  return {
    el,
    async refresh(ctx: Ctx) {
      const a = await ctx.get<Book>(paths.book);
      if (!a.data) {
        asks.answer(a, ctx.now, () => null);
        bids.show("", ctx.now, () => null);
        return;
      }
      const b = a.data;
      asks.show(JSON.stringify(b.asks), ctx.now, () => askTable(list(b.asks), ctx.now));
      bids.show(JSON.stringify(b.bids), ctx.now, () => bidTable(list(b.bids), ctx.now));
    },
  };
}

/** askTable lists asks; the supplier page uses it too. */
export function askTable(rows: OrderView[], now: number, withSupplier = true): HTMLElement {
  const cols: Column<OrderView>[] = [
    { head: "Model", cell: (o) => o.model ?? "–" },
    { head: "GPUs", num: true, cell: (o) => num(o.count) },
    { head: "Price", num: true, cell: (o) => price(o.price_micros) },
    { head: "Pricing", cell: (o) => o.pricing || "–" },
    { head: "Region", cell: (o) => o.region || "–" },
    ...(withSupplier ? [{ head: "Supplier", cell: (o: OrderView) => peer(o.peer) }] : []),
    { head: "Duration", num: true, cell: (o) => duration(o.duration_s) },
    { head: "Posted", cell: (o) => ago(o.created, now) },
    { head: "Gossip delay", num: true, cell: (o) => gossipDelay(o) },
    { head: "Expires", cell: (o) => ago(o.expires, now) },
    { head: "", cell: (o) => (o.simulated ? badge("warn", "simulated GPUs") : null) },
    { head: "ID", cell: (o) => shortID(o.id) },
    { head: "Signature", cell: (o) => sig(o.signature_ok) },
  ];
  return table(cols, rows, "No live asks.", (o) => ({ "data-order": o.id, "data-peer": o.peer }));
}

function bidTable(rows: OrderView[], now: number): HTMLElement {
  const cols: Column<OrderView>[] = [
    { head: "Filter", cell: (o) => h("code", null, o.filter || "(any)") },
    { head: "GPUs", num: true, cell: (o) => num(o.count) },
    { head: "Max price", num: true, cell: (o) => price(o.price_micros) },
    { head: "Region", cell: (o) => o.region || "–" },
    { head: "Renter", cell: (o) => peer(o.peer, false) },
    { head: "Duration", num: true, cell: (o) => duration(o.duration_s) },
    { head: "Posted", cell: (o) => ago(o.created, now) },
    { head: "Expires", cell: (o) => ago(o.expires, now) },
    { head: "ID", cell: (o) => shortID(o.id) },
    { head: "Signature", cell: (o) => sig(o.signature_ok) },
  ];
  return table(cols, rows, "No live bids.", (o) => ({ "data-order": o.id, "data-peer": o.peer }));
}

function duration(s: number | undefined): string {
  if (!s) return "–";
  if (s % 3600 === 0) return `${s / 3600} h`;
  if (s % 60 === 0) return `${s / 60} min`;
  return `${s} s`;
}

function gossipDelay(o: OrderView): string {
  if (!o.received) return "–";
  const ms = Date.parse(o.received) - Date.parse(o.created);
  if (!Number.isFinite(ms)) return "–";
  return ms < 1000 ? `${Math.max(0, ms)} ms` : relative(ms).replace(" ago", "");
}
