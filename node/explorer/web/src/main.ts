// The gpumesh Explorer: a page served by a node that shows, from that
// node's own signed and verified records, what the network holds. Hash
// routes pick the page; every 2 seconds the page asks the node again and
// redraws what changed, so nothing needs a reload.

import "./style.css";
import { get, paths, Unreachable, type Summary } from "./api";
import { fill, h, peer, route } from "./dom";
import { book } from "./views/book";
import { gpus } from "./views/gpus";
import { thisNode } from "./views/node";
import { overview } from "./views/overview";
import { supplier } from "./views/supplier";
import { suppliers } from "./views/suppliers";
import type { Ctx, View } from "./views/view";

const pollMs = 2000;
const tokenKey = "gpumesh.api-token";

/** The API token, kept for this tab only. Storage may be off (private
 *  modes, policies): the token then lasts until the page is left. */
class TokenStore {
  private mem: string | undefined;

  get(): string | undefined {
    try {
      return sessionStorage.getItem(tokenKey) ?? undefined;
    } catch {
      return this.mem;
    }
  }

  set(t: string | undefined): void {
    this.mem = t;
    try {
      if (t) sessionStorage.setItem(tokenKey, t);
      else sessionStorage.removeItem(tokenKey);
    } catch {
      // kept in memory only
    }
  }

  /** fromURL takes a token given as #token=... into the store and takes it
   *  out of the address bar (and history), leaving #/node. */
  fromURL(): boolean {
    const m = /^#\/?(?:node)?[?&]?token=([^&]*)/.exec(location.hash);
    if (!m) return false;
    let t: string;
    try {
      t = decodeURIComponent(m[1]).trim();
    } catch {
      t = m[1];
    }
    if (t) this.set(t);
    history.replaceState(null, "", `${location.pathname}${location.search}${route("node")}`);
    return true;
  }
}

interface Page {
  name: string;
  make: () => View;
}

/** resolve maps a location hash to its page. */
function resolve(hash: string): Page {
  const parts = hash.replace(/^#\/?/, "").split("/");
  switch (parts[0]) {
    case "":
      return { name: "overview", make: overview };
    case "gpus":
      return { name: "gpus", make: gpus };
    case "book":
      return { name: "book", make: book };
    case "suppliers":
      return { name: "suppliers", make: suppliers };
    case "supplier": {
      let id = parts.slice(1).join("/");
      try {
        id = decodeURIComponent(id);
      } catch {
        // shown as given
      }
      return id ? { name: "suppliers", make: () => supplier(id) } : { name: "suppliers", make: suppliers };
    }
    case "node":
      return { name: "node", make: thisNode };
    default:
      return { name: "", make: notFound };
  }
}

function notFound(): View {
  const el = h("section", null, h("h1", null, "No such page"), h("p", null, "Go to the ", h("a", { href: route() }, "overview"), "."));
  return { el, refresh: async () => {} };
}

class App {
  private view?: View;
  private ctrl = new AbortController();
  private timer?: ReturnType<typeof setTimeout>;
  private readonly tokens = new TokenStore();
  private readonly main = document.getElementById("main")!;
  private readonly live = document.getElementById("live")!;
  private readonly trust = document.getElementById("trust")!;
  private self = "";

  start(): void {
    this.tokens.fromURL();
    window.addEventListener("hashchange", () => {
      this.tokens.fromURL(); // its replaceState fires no second hashchange
      this.mount();
    });
    this.mount();
  }

  /** mount leaves the current page (aborting its requests) and shows the
   *  one the hash names. */
  private mount(): void {
    this.ctrl.abort();
    clearTimeout(this.timer);
    this.view?.destroy?.();
    this.ctrl = new AbortController();
    const page = resolve(location.hash);
    this.view = page.make();
    this.main.replaceChildren(this.view.el);
    for (const a of document.querySelectorAll<HTMLAnchorElement>("#nav a")) {
      a.classList.toggle("active", a.dataset.route === page.name);
    }
    void this.tick(this.ctrl, this.view);
  }

  /** tick polls once for view, then schedules the next poll; it stops when
   *  ctrl is aborted (the page was left). */
  private async tick(ctrl: AbortController, view: View): Promise<void> {
    const signal = ctrl.signal;
    const summary = get<Summary>(paths.summary, signal);
    // the header as soon as the summary comes; a failure is handled below
    summary.then((a) => signal.aborted || this.header(a.data), () => {});
    const ctx: Ctx = {
      signal,
      now: Date.now(),
      summary,
      get: (path, withToken) => get(path, signal, withToken ? this.tokens.get() : undefined),
      token: () => this.tokens.get(),
      setToken: (t) => {
        this.tokens.set(t);
        this.mount();
      },
    };
    try {
      await Promise.all([summary, view.refresh(ctx)]);
      if (signal.aborted) return;
      this.live.className = "live ok";
      this.live.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (signal.aborted) return;
      this.live.className = "live down";
      if (err instanceof Unreachable) {
        this.live.textContent = "this node does not answer: retrying";
      } else {
        this.live.textContent = `the page failed: ${err instanceof Error ? err.message : String(err)}`;
        reportError(err); // a bug: let it reach the console
      }
    } finally {
      if (!signal.aborted) this.timer = setTimeout(() => void this.tick(ctrl, view), pollMs);
    }
  }

  /** header names the node the page's numbers come from. */
  private header(s: Summary | undefined): void {
    if (!s || s.peer_id === this.self) return;
    this.self = s.peer_id;
    fill(
      this.trust,
      "Every number on this page comes from signed records that this node (",
      peer(s.peer_id, false),
      ") received and verified. ",
      h("span", { class: "badge ok" }, "✓ signed"),
      " marks a record whose signature the node checked again when it read it back from its own records.",
    );
  }
}

new App().start();
