// What every page of the Explorer is: an element, refreshed on every poll
// from answers of this node's API, and torn down when the route changes.

import type { Answer, Summary } from "../api";
import { errorText } from "../api";
import { fill, h, type Child } from "../dom";

/** Ctx is what a page gets on each refresh. */
export interface Ctx {
  /** aborted when the page is left */
  signal: AbortSignal;
  /** when this poll began, in ms since the epoch */
  now: number;
  /** this poll's GET of the summary, which the header also shows; it is
   *  asked at the same time as the page's own routes */
  summary: Promise<Answer<Summary>>;
  /** get fetches a path of this node's API (with the token, when asked) */
  get<T>(path: string, withToken?: boolean): Promise<Answer<T>>;
  /** the API token for the private routes, when the user gave one */
  token(): string | undefined;
  setToken(token: string | undefined): void;
}

export interface View {
  el: HTMLElement;
  refresh(ctx: Ctx): Promise<void>;
  destroy?(): void;
}

/** How often a section is drawn again even when its data did not change,
 *  so that "12s ago" stays true. */
const staleAfterMs = 10_000;

/** Slot is one section of a page, drawn again only when what it shows
 *  changed (or its relative times went stale): tables are not rebuilt
 *  on every poll for nothing. */
export class Slot {
  readonly el: HTMLElement;
  private key: string | undefined;
  private at = 0;

  constructor(attrs?: Record<string, string>) {
    this.el = h("div", attrs ?? null);
  }

  /** show draws render() when key differs from last time or the
   *  section is stale. */
  show(key: string, now: number, render: () => Child): void {
    if (key === this.key && now - this.at < staleAfterMs) return;
    this.key = key;
    this.at = now;
    fill(this.el, render());
  }

  /** answer draws an API answer: render(data) for a 2xx, else the error. */
  answer<T>(a: Answer<T>, now: number, render: (data: T) => Child): void {
    this.show(`${a.status}\n${a.text}`, now, () => (a.data !== undefined ? render(a.data) : failure(a)));
  }
}

/** failure shows an error answer. */
export function failure(a: Answer<unknown>): HTMLElement {
  return h("div", { class: "alert bad" }, errorText(a));
}

/** list is a nullable JSON array as an array. */
export function list<T>(v: T[] | null | undefined): T[] {
  return v ?? [];
}
