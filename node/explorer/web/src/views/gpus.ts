// GPUs by model (#/gpus): each model's supply and its trade prints over
// time, one chart per model.

import { paths, type Answer, type ModelSummary, type Trade } from "../api";
import { h, num, price } from "../dom";
import { TimeChart } from "../chart";
import { tradeTable } from "./overview";
import { Slot, failure, list, type Ctx, type View } from "./view";

const tableRows = 8;

interface Panel {
  el: HTMLElement;
  stats: Slot;
  chart: TimeChart;
  trades: Slot;
}

export function gpus(): View {
  const panels = new Map<string, Panel>();
  const grid = h("div", { class: "panels" });
  const status = new Slot();
  const el = h(
    "section",
    { "data-page": "gpus" },
    h("h1", null, "GPUs and prices by model"),
    h("p", { class: "muted" }, "Each point is a trade print: a lease that both sides signed, gossiped to the network. Prices per GPU-hour."),
    status.el,
    grid,
  );

  function panel(model: string): Panel {
    let p = panels.get(model);
    if (p) return p;
    const stats = new Slot({ class: "stats" });
    const chart = new TimeChart({ label: "price", kind: "line", fmt: (v) => v.toFixed(2), empty: "No trade prints yet.", height: 190 });
    const trades = new Slot();
    p = {
      el: h("div", { class: "panel", "data-model": model }, h("h3", null, model), stats.el, chart.el, trades.el),
      stats,
      chart,
      trades,
    };
    panels.set(model, p);
    return p;
  }

  return {
    el,
    async refresh(ctx: Ctx) {
      const s = await ctx.summary;
      if (!s.data) {
        status.show(s.text, ctx.now, () => failure(s));
        return;
      }
      const models = list(s.data.models);
      status.show(String(models.length), ctx.now, () =>
        models.length === 0 ? h("div", { class: "alert info" }, "No GPU models on offer yet: no supplier has a live ask.") : null,
      );
      const answers = await Promise.all(models.map((m) => ctx.get<Trade[]>(paths.trades(m.model))));
      const keep = new Set<string>();
      const order: HTMLElement[] = [];
      models.forEach((m, i) => {
        keep.add(m.model);
        const p = panel(m.model);
        order.push(p.el);
        showModel(p, m, answers[i], ctx.now);
      });
      for (const [model, p] of panels) {
        if (!keep.has(model)) {
          p.chart.destroy();
          panels.delete(model);
        }
      }
      // keep the panels in the summary's order, moving only what moved
      order.forEach((node, i) => {
        if (grid.children[i] !== node) grid.insertBefore(node, grid.children[i] ?? null);
      });
      while (grid.children.length > order.length) grid.lastElementChild!.remove();
    },
    destroy() {
      for (const p of panels.values()) p.chart.destroy();
      panels.clear();
    },
  };
}

function showModel(p: Panel, m: ModelSummary, a: Answer<Trade[]>, now: number): void {
  p.stats.show(JSON.stringify(m), now, () => [
    stat("suppliers", num(m.suppliers)),
    stat("GPUs", num(m.gpus)),
    stat("asks", num(m.asks)),
    stat("cheapest", price(m.cheapest_micros)),
    stat("last", price(m.last_micros)),
    stat("VWAP", price(m.vwap_micros)),
    stat("trades", num(m.trades)),
  ]);
  if (!a.data) {
    p.trades.show(a.text, now, () => failure(a));
    return;
  }
  // uPlot wants x ascending; the API sends oldest first, but sort anyway
  const points = list(a.data)
    .map((t) => [Date.parse(t.time) / 1000, t.price_micros / 1_000_000] as const)
    .filter(([x]) => Number.isFinite(x))
    .sort((a, b) => a[0] - b[0]);
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  p.chart.set(xs, ys);
  p.trades.answer(a, now, (all) => tradeTable(list(all).slice(-tableRows).reverse(), now));
}

function stat(label: string, value: string): HTMLElement {
  return h("span", null, `${label} `, h("b", null, value));
}
