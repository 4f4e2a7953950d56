// This node (#/node): its own leases, receipts and jobs, from the routes
// behind the API token. The token never leaves this tab: it is kept in
// sessionStorage and sent only to this node, as a bearer token.

import { paths, type Answer, type JobView, type LeaseView, type ReceiptReport } from "../api";
import { ago, badge, h, micros, num, peer, price, shortID, table, type Column } from "../dom";
import { Slot, list, type Ctx, type View } from "./view";

export function thisNode(): View {
  const who = new Slot({ id: "node-id" });
  const auth = new Slot({ id: "token" });
  const leases = new Slot({ id: "leases" });
  const receipts = new Slot({ id: "receipts" });
  const jobs = new Slot({ id: "jobs" });
  const privateParts = h(
    "div",
    null,
    h("h2", null, "Leases"),
    leases.el,
    h("h2", null, "Receipts"),
    h("p", { class: "muted small" }, "Each lease's bill checked again now: every usage receipt the supplier signed, every voucher the renter signed, and the settlement."),
    receipts.el,
    h("h2", null, "Jobs"),
    jobs.el,
  );
  const el = h("section", { "data-page": "node" }, h("h1", null, "This node"), who.el, auth.el, privateParts);

  let ctxRef: Ctx | undefined;
  const form = (message: string, bad: boolean) => {
    const input = h("input", { type: "password", name: "token", autocomplete: "off", placeholder: "API token", "aria-label": "API token" });
    const submit = (e: Event) => {
      e.preventDefault();
      const t = input.value.trim();
      if (t && ctxRef) {
        ctxRef.setToken(t);
        auth.show("", 0, () => h("p", { class: "muted" }, "Checking the token…"));
      }
    };
    return h(
      "div",
      { class: `alert ${bad ? "bad" : "info"}` },
      h("p", null, message),
      h(
        "p",
        null,
        "The token is in the node's data directory, in the file ",
        h("code", null, "DATA/api.token"),
        " (by default ",
        h("code", null, "~/.gpumesh/api.token"),
        "). Paste it here, or open this page as ",
        h("code", null, "#token=<token>"),
        ". It is kept for this tab only (sessionStorage) and sent to this node alone.",
      ),
      h("form", { class: "toolbar", onsubmit: submit }, input, h("button", { class: "primary", type: "submit" }, "Use token")),
    );
  };

  return {
    el,
    async refresh(ctx: Ctx) {
      ctxRef = ctx;
      const s = (await ctx.summary).data;
      who.show(s?.peer_id ?? "", ctx.now, () => (s ? h("p", null, "Peer ID ", h("span", { class: "peer", id: "self" }, s.peer_id)) : null));
      const token = ctx.token();
      if (!token) {
        privateParts.hidden = true;
        auth.show("none", ctx.now, () => form("This node's leases, receipts and jobs are private: they need the node's API token.", false));
        return;
      }
      const [l, r, j] = await Promise.all([
        ctx.get<LeaseView[]>(paths.leases, true),
        ctx.get<ReceiptReport[]>(paths.receipts, true),
        ctx.get<JobView[]>(paths.jobs, true),
      ]);
      if ([l, r, j].some((a) => a.status === 401)) {
        privateParts.hidden = true;
        auth.show("refused", ctx.now, () => form("This node refused the token (HTTP 401): it is not this node's API token.", true));
        return;
      }
      privateParts.hidden = false;
      auth.show("ok", ctx.now, () =>
        h(
          "p",
          { class: "toolbar" },
          badge("ok", "✓ token accepted"),
          h("button", { type: "button", onclick: () => ctxRef?.setToken(undefined) }, "Forget token"),
        ),
      );
      leases.answer(l, ctx.now, (rows) => leaseTable(list(rows), ctx.now));
      notStarted(receipts, r, ctx.now, (rows) => receiptTable(list(rows)));
      notStarted(jobs, j, ctx.now, (rows) => jobTable(list(rows), ctx.now));
    },
  };
}

function leaseTable(rows: LeaseView[], now: number): HTMLElement {
  const cols: Column<LeaseView>[] = [
    { head: "Lease", cell: (l) => shortID(l.lease_id) },
    { head: "Role", cell: (l) => l.role || "–" },
    { head: "State", cell: (l) => l.state || "–" },
    { head: "Model", cell: (l) => l.model },
    { head: "GPUs", num: true, cell: (l) => num(l.count) },
    { head: "Price", num: true, cell: (l) => price(l.price_micros) },
    { head: "Supplier", cell: (l) => peer(l.supplier) },
    { head: "Renter", cell: (l) => peer(l.renter, false) },
    { head: "Started", cell: (l) => ago(l.start, now) },
    { head: "Ends", cell: (l) => ago(l.end, now) },
    { head: "Signatures", cell: (l) => (l.verified ? badge("ok", "✓ both signatures checked") : badge("bad", "✗ not verified")) },
    { head: "Reason", wrap: true, cell: (l) => l.reason || "" },
  ];
  return table(cols, rows, "No leases: this node has neither rented nor served GPUs.", (l) => ({ "data-lease": l.lease_id }));
}

function receiptTable(rows: ReceiptReport[]): HTMLElement {
  const cols: Column<ReceiptReport>[] = [
    { head: "Lease", cell: (r) => shortID(r.lease_id) },
    { head: "Role", cell: (r) => r.role },
    { head: "Supplier", cell: (r) => peer(r.supplier) },
    { head: "Renter", cell: (r) => peer(r.renter, false) },
    { head: "Receipts", num: true, cell: (r) => num(r.receipts) },
    { head: "GPU-seconds", num: true, cell: (r) => num(r.gpu_seconds, 1) },
    { head: "Billed", num: true, cell: (r) => micros(r.amount_micros) },
    { head: "Paid", num: true, cell: (r) => micros(r.paid_micros) },
    { head: "Settled", cell: (r) => (r.settled ? badge("ok", "settled") : badge("plain", "open")) },
    {
      head: "Check",
      wrap: true,
      cell: (r) => (r.valid ? badge("ok", "✓ every signature and sum checked") : [badge("bad", "✗ problems"), " ", h("span", { class: "reason" }, list(r.problems).join("; "))]),
    },
  ];
  return table(cols, rows, "No receipts: no job has been billed on this node.", (r) => ({ "data-lease": r.lease_id }));
}

/** notStarted draws an answer of the job routes, which say 503 until the
 *  node has started its jobs. */
function notStarted<T>(slot: Slot, a: Answer<T>, now: number, render: (data: T) => HTMLElement): void {
  if (a.status === 503) slot.show("503", now, () => h("p", { class: "muted" }, "Jobs are not started on this node yet."));
  else slot.answer(a, now, render);
}

function jobTable(rows: JobView[], now: number): HTMLElement {
  const cols: Column<JobView>[] = [
    { head: "Job", cell: (j) => shortID(j.job_id) },
    { head: "State", cell: (j) => j.state },
    { head: "Attempt", num: true, cell: (j) => num(j.attempt) },
    { head: "Supplier", cell: (j) => peer(j.supplier) },
    { head: "Failovers", num: true, cell: (j) => num(j.failovers) },
    { head: "Paid", num: true, cell: (j) => micros(j.paid_micros) },
    { head: "Created", cell: (j) => ago(j.created, now) },
    { head: "Message", wrap: true, cell: (j) => j.message || "" },
  ];
  return table(cols, rows, "No jobs.", (j) => ({ "data-job": j.job_id }));
}
