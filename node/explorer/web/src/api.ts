// The node's API as the Explorer reads it: the public explorer routes
// (no token) and the token-protected routes of the "This node" page. The
// types follow node/api's JSON; every string in them came from the
// network and is rendered as text only.

export interface ModelSummary {
  model: string;
  suppliers: number;
  gpus: number;
  asks: number;
  cheapest_micros: number;
  trades: number;
  last_micros: number;
  vwap_micros: number;
}

export interface RegionSummary {
  region: string;
  suppliers: number;
  gpus: number;
}

export interface Summary {
  peer_id: string;
  time: string;
  nodes: number;
  suppliers: number;
  gpus: { total: number; free: number; leased: number };
  models: ModelSummary[] | null;
  regions: RegionSummary[] | null;
  asks: number;
  bids: number;
  trades: number;
  verified_suppliers: number;
  attestations: number;
}

export interface Verdict {
  model: string;
  passed: boolean;
  reason: string;
  challenger: string;
  time: string;
}

export interface SupplierRow {
  peer_id: string;
  region: string;
  software: string;
  gpus_total: number;
  gpus_free: number;
  models: { model: string; count: number }[] | null;
  asks: number;
  cheapest_micros: number;
  reputation: number;
  verified: boolean;
  simulated: boolean;
  uptime_pct: number | null;
  last_verdict: Verdict | null;
  last_seen: string;
  connected: boolean;
  leases_served: number;
  gpu_hours_served: number;
}

export interface OrderView {
  id: string;
  kind: "ask" | "bid";
  peer: string;
  model?: string;
  filter?: string;
  count: number;
  price_micros: number;
  price: string;
  region?: string;
  pricing?: string;
  duration_s?: number;
  simulated?: boolean;
  created: string;
  expires: string;
  received?: string;
  signature_ok?: boolean;
}

export interface Attestation {
  id: string;
  challenger: string;
  subject: string;
  kind: "challenge" | "uptime" | string;
  model: string;
  passed: boolean;
  reason: string;
  gpus: number;
  measured_milli_ops: number;
  expected_milli_ops: number;
  time: string;
  signature_ok: boolean;
}

export interface Trade {
  id: string;
  model: string;
  supplier: string;
  count: number;
  price_micros: number;
  price: string;
  gpu_hours: number;
  time: string;
  signature_ok: boolean;
}

export interface UptimeDay {
  day: string;
  checks: number;
  passed: number;
  pct: number | null;
}

export interface Reputation {
  reputation: number;
  verified: boolean;
  passes: number;
  fails: number;
  challengers: number;
  uptime: number;
  pings: number;
  last_challenge?: string;
  conflict: boolean;
  trust: number;
}

export interface SupplierDetail {
  supplier: SupplierRow;
  asks: OrderView[] | null;
  attestations: Attestation[] | null;
  uptime: UptimeDay[] | null;
  trades: Trade[] | null;
  reputation: Reputation;
  vouched_by: string[] | null;
}

export interface Book {
  asks: OrderView[] | null;
  bids: OrderView[] | null;
}

export interface LeaseView {
  lease_id: string;
  supplier: string;
  renter: string;
  model: string;
  count: number;
  price_micros: number;
  price: string;
  start: string;
  end: string;
  gpus: string[] | null;
  verified: boolean;
  state?: string;
  role?: string;
  reason?: string;
}

export interface ReceiptReport {
  lease_id: string;
  role: string;
  supplier: string;
  renter: string;
  receipts: number;
  attempts: number[] | null;
  gpu_seconds: number;
  amount_micros: number;
  paid_micros: number;
  settled: boolean;
  valid: boolean;
  problems: string[] | null;
}

export interface JobView {
  job_id: string;
  state: string;
  attempt: number;
  supplier: string;
  lease_id: string;
  exit_code: number;
  message?: string;
  failovers: number;
  restarts: number;
  paid_micros: number;
  created: string;
  updated: string;
}

export const paths = {
  summary: "/api/v1/explorer/summary",
  suppliers: "/api/v1/explorer/suppliers",
  supplier: (peer: string) => `/api/v1/explorer/suppliers/${encodeURIComponent(peer)}`,
  trades: (model?: string) =>
    model === undefined ? "/api/v1/explorer/trades" : `/api/v1/explorer/trades?model=${encodeURIComponent(model)}`,
  book: "/api/v1/explorer/book",
  leases: "/api/v1/leases",
  receipts: "/api/v1/receipts",
  jobs: "/api/v1/jobs",
} as const;

/** The answer to one GET: the status, the body as text (to tell whether
 *  anything changed since the last poll) and, for a 2xx, the decoded body. */
export interface Answer<T> {
  status: number;
  text: string;
  data?: T;
}

/** An error reaching the node at all (not an HTTP error status). */
export class Unreachable extends Error {}

/** get fetches path from the node that served the page; with a token it
 *  sends it as a bearer token. It never throws for an HTTP status, only
 *  Unreachable when the node did not answer (or AbortError when aborted). */
export async function get<T>(path: string, signal: AbortSignal, token?: string): Promise<Answer<T>> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  let res: Response;
  try {
    res = await fetch(path, { headers, signal, cache: "no-store", credentials: "omit" });
  } catch (err) {
    if (signal.aborted) throw err;
    throw new Unreachable(err instanceof Error ? err.message : String(err));
  }
  const text = await res.text();
  if (!res.ok) return { status: res.status, text };
  try {
    return { status: res.status, text, data: JSON.parse(text) as T };
  } catch {
    return { status: 502, text: `the node answered ${path} with something that is not JSON` };
  }
}

/** errorText is what an error answer says, for the page. */
export function errorText(a: Answer<unknown>): string {
  let msg = a.text.trim();
  try {
    const body = JSON.parse(msg);
    if (body && typeof body.error === "string") msg = body.error;
  } catch {
    // a plain-text error body
  }
  return `HTTP ${a.status}${msg ? `: ${msg}` : ""}`;
}
