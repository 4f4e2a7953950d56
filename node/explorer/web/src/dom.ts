// DOM building without innerHTML: every string, most of them from the
// network (peer IDs, regions, software, reasons), becomes a text node or
// an attribute value, never markup.

export type Child = Node | string | number | null | undefined | false | Child[];
type AttrValue = string | number | boolean | null | undefined;
export type Attrs = Record<string, AttrValue | EventListener>;

/** h makes an element with attributes and children. "class" sets the
 *  class; on* keys with a function add a listener; false, null and
 *  undefined leave an attribute out. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (typeof v === "function") {
        el.addEventListener(k.slice(2), v);
      } else if (v === false || v === null || v === undefined) {
        continue;
      } else if (k === "class") {
        el.className = String(v);
      } else {
        el.setAttribute(k, v === true ? "" : String(v));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** fill replaces el's children. */
export function fill(el: Element, ...children: Child[]): void {
  const frag = document.createDocumentFragment();
  append(frag, children);
  el.replaceChildren(frag);
}

/** route makes the href of an Explorer page; parts are URI-encoded. */
export function route(...parts: string[]): string {
  return "#/" + parts.map(encodeURIComponent).join("/");
}

// ---- formatting -----------------------------------------------------------

/** micros formats integer micro-units (1.00 = 1_000_000) with at least
 *  two and at most six decimals, from integers only. */
export function micros(m: number | null | undefined): string {
  if (m === null || m === undefined || !Number.isFinite(m)) return "–";
  const neg = m < 0;
  const abs = Math.abs(Math.trunc(m));
  const whole = Math.floor(abs / 1_000_000);
  let frac = String(abs % 1_000_000).padStart(6, "0").replace(/0+$/, "");
  if (frac.length < 2) frac = frac.padEnd(2, "0");
  return `${neg ? "-" : ""}${num(whole)}.${frac}`;
}

/** price formats a price per GPU-hour; 0 means none. */
export function price(m: number | null | undefined): string {
  return m ? `${micros(m)}/GPU·h` : "–";
}

/** One number format per number of decimals: making an Intl.NumberFormat
 *  costs far more than using one, and tables format thousands of cells. */
const formats = new Map<number, Intl.NumberFormat>();

export function num(n: number | null | undefined, digits = 0): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "–";
  let f = formats.get(digits);
  if (!f) {
    f = new Intl.NumberFormat("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
    formats.set(digits, f);
  }
  return f.format(n);
}

export function pct(n: number | null | undefined): string {
  return n === null || n === undefined ? "–" : `${num(n, n === 100 || n === 0 ? 0 : 1)}%`;
}

/** ago says how long before now t was, with the time itself as a title. */
export function ago(t: string | null | undefined, now = Date.now()): HTMLElement {
  if (!t) return h("span", { class: "muted" }, "–");
  const ms = Date.parse(t);
  if (!Number.isFinite(ms) || ms <= 0) return h("span", { class: "muted" }, "–");
  return h("time", { datetime: t, title: new Date(ms).toISOString() }, relative(now - ms));
}

export function relative(ms: number): string {
  const future = ms < 0;
  let s = Math.round(Math.abs(ms) / 1000);
  let out: string;
  if (s < 1) return "just now";
  if (s < 60) out = `${s}s`;
  else if ((s = Math.round(s / 60)) < 60) out = `${s}m`;
  else if ((s = Math.round(s / 60)) < 48) out = `${s}h`;
  else out = `${Math.round(s / 24)}d`;
  return future ? `in ${out}` : `${out} ago`;
}

/** when formats a time as UTC, to the second. */
export function when(t: string | null | undefined): string {
  if (!t) return "–";
  const ms = Date.parse(t);
  if (!Number.isFinite(ms) || ms <= 0) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** peer shows a peer ID short, in full as its title, linked to its
 *  supplier page when link is set. */
export function peer(id: string | null | undefined, link = true): HTMLElement {
  if (!id) return h("span", { class: "muted" }, "–");
  const short = id.length > 20 ? `${id.slice(0, 8)}…${id.slice(-6)}` : id;
  if (!link) return h("span", { class: "peer", title: id }, short);
  return h("a", { class: "peer", href: route("supplier", id), title: id, "data-peer": id }, short);
}

export function shortID(id: string | null | undefined): HTMLElement {
  if (!id) return h("span", { class: "muted" }, "–");
  return h("span", { class: "mono", title: id }, id.length > 12 ? id.slice(0, 12) : id);
}

// ---- badges ---------------------------------------------------------------

export function badge(kind: "ok" | "bad" | "warn" | "plain", text: string, title?: string): HTMLElement {
  return h("span", { class: `badge ${kind}`, title }, text);
}

/** sig shows whether this node checked a record's signature when it
 *  answered (signature_ok). Records without the field (orders, rows the
 *  node derived) are shown as taken from its checked book. */
export function sig(ok: boolean | undefined): HTMLElement {
  if (ok === true) return badge("ok", "✓ signed", "signature checked by this node");
  if (ok === false) return badge("bad", "✗ bad signature", "this node could not verify the signature of this record");
  return badge("plain", "✓ checked on receipt", "this node checked the signature when the record arrived");
}

/** verdict shows a challenge verdict: passed, or failed with its reason. */
export function verdict(passed: boolean, reason: string | undefined): HTMLElement {
  if (passed) return badge("ok", "✓ passed", reason || undefined);
  return h("span", { class: "verdict-failed" }, badge("bad", "✗ failed"), " ", h("span", { class: "reason" }, reason || "no reason given"));
}

// ---- tables ---------------------------------------------------------------

export interface Column<T> {
  head: string;
  cell: (row: T) => Child;
  num?: boolean;
  wrap?: boolean;
}

/** table renders rows under columns, or what empty says when there are
 *  none. rowAttrs adds attributes (data-*, class) to each row. */
export function table<T>(
  cols: Column<T>[],
  rows: T[] | null | undefined,
  empty: string,
  rowAttrs?: (row: T) => Attrs,
): HTMLElement {
  if (!rows || rows.length === 0) return h("div", { class: "table-wrap" }, h("div", { class: "empty" }, empty));
  const thead = h("thead", null, h("tr", null, cols.map((c) => h("th", { class: c.num ? "num" : null }, c.head))));
  const tbody = h("tbody");
  const frag = document.createDocumentFragment();
  for (const r of rows) {
    const tr = h("tr", rowAttrs ? rowAttrs(r) : null);
    for (const c of cols) tr.appendChild(h("td", { class: c.num ? "num" : c.wrap ? "wrap" : null }, c.cell(r)));
    frag.appendChild(tr);
  }
  tbody.appendChild(frag);
  return h("div", { class: "table-wrap" }, h("table", null, thead, tbody));
}

export function card(label: string, value: Child, sub?: Child, attrs?: Attrs): HTMLElement {
  return h("div", { class: "card", ...attrs }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), sub ? h("div", { class: "sub" }, sub) : null);
}
