// Time charts on uPlot: trade prints (points joined by a line) and daily
// uptime (bars). A chart is made when it first has data and updated in
// place (setData) on every poll after that.

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { h, fill } from "./dom";

export interface ChartOptions {
  /** the series' name in the legend */
  label: string;
  kind: "line" | "bars";
  /** formats a y value for the axis and the legend */
  fmt: (v: number) => string;
  /** a fixed y range; auto from the data when absent */
  yRange?: [number, number];
  /** shown instead of a chart when there is no data */
  empty: string;
  height?: number;
}

export class TimeChart {
  readonly el: HTMLElement;
  private plot?: uPlot;
  private key = "";
  private readonly resize: ResizeObserver;

  constructor(private readonly opts: ChartOptions) {
    this.el = h("div", { class: "chart" });
    fill(this.el, h("div", { class: "none" }, opts.empty));
    this.resize = new ResizeObserver(() => {
      const w = this.width();
      if (this.plot && w > 0 && Math.abs(w - this.plot.width) > 1) this.plot.setSize({ width: w, height: this.plot.height });
    });
    this.resize.observe(this.el);
  }

  /** set shows the points (xs in Unix seconds, ascending); it does
   *  nothing when they are the same as last time. */
  set(xs: number[], ys: (number | null)[]): void {
    const key = JSON.stringify([xs, ys]);
    if (key === this.key) return;
    this.key = key;
    if (xs.length === 0) {
      this.plot?.destroy();
      this.plot = undefined;
      fill(this.el, h("div", { class: "none" }, this.opts.empty));
      return;
    }
    const data: uPlot.AlignedData = [xs, ys];
    if (this.plot) {
      this.plot.setData(data);
      return;
    }
    this.el.replaceChildren();
    this.plot = new uPlot(this.options(), data, this.el);
  }

  destroy(): void {
    this.resize.disconnect();
    this.plot?.destroy();
    this.plot = undefined;
  }

  private width(): number {
    return Math.max(0, Math.floor(this.el.clientWidth));
  }

  private options(): uPlot.Options {
    const { label, kind, fmt, yRange } = this.opts;
    const bars = kind === "bars";
    const color = bars ? "#16794c" : "#2f6feb";
    return {
      width: this.width() || 400,
      height: this.opts.height ?? 200,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true, range: (u) => padTime(u.data[0], bars) },
        y: yRange ? { range: yRange } : { range: (_u, min, max) => padRange(min, max) },
      },
      axes: [
        { stroke: "#667085", grid: { stroke: "#eef0f3" } },
        { stroke: "#667085", grid: { stroke: "#eef0f3" }, size: 60, values: (_u, vals) => vals.map(fmt) },
      ],
      series: [
        { label: "time" },
        bars
          ? {
              label,
              stroke: color,
              fill: "rgba(22,121,76,0.35)",
              paths: uPlot.paths.bars!({ size: [0.7, 40] }),
              points: { show: false },
              value: (_u, v, _si, idx) => (idx === null ? "–" : v === null ? "no checks" : fmt(v)),
            }
          : {
              label,
              stroke: color,
              width: 1.5,
              points: { show: true, size: 6, fill: color },
              value: (_u, v, _si, idx) => (idx === null || v === null ? "–" : fmt(v)),
            },
      ],
    };
  }
}

const day = 86_400;

/** padTime is the time axis's range, from the data itself (uPlot widens
 *  a single point to 1000 days): half a day more on each side for daily
 *  bars, so that the first and last are whole; an hour around a single
 *  point; 5% more otherwise. */
function padTime(xs: ArrayLike<number>, bars: boolean): uPlot.Range.MinMax {
  if (xs.length === 0) return [null, null];
  const min = xs[0];
  const max = xs[xs.length - 1];
  if (bars) return [min - day / 2, max + day / 2];
  if (min === max) return [min - 3600, max + 3600];
  const pad = (max - min) * 0.05;
  return [min - pad, max + pad];
}

/** padRange widens a y range so that a single price is not a flat line
 *  on the chart's edge. */
function padRange(min: number | null, max: number | null): uPlot.Range.MinMax {
  if (min === null || max === null) return [0, 1];
  if (min === max) return [Math.max(0, min * 0.8), max * 1.2 || 1];
  const pad = (max - min) * 0.1;
  return [Math.max(0, min - pad), max + pad];
}
