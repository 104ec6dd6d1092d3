// The router: the route table, the parse of a location into the screen it shows, and navigation inside the app
// (navigate, useLocation, Link, the paths of the screens). Routes live in the path under /dashboard/ and their state
// (search, filters) in the query, so every screen can be linked and reloaded. It imports no screen: the screens
// import it, and app.tsx maps each route to its screen.
import { useEffect, useState } from "preact/hooks";

export const BASE = "/dashboard/";

const enc = encodeURIComponent;

// The paths of the screens that take an argument.
export const groupPath = (id: string) => `${BASE}groups/${enc(id)}`;
export const newGroupPath = (parent?: string) => (parent === undefined ? BASE + "groups/new" : `${BASE}groups/new?parent=${enc(parent)}`);

export function navigate(to: string, replace = false) {
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  window.dispatchEvent(new Event("mg:navigate"));
}

// replaceQuery replaces the current history entry with path and the query from, where each name of changes is set
// to its value, or removed when the value is empty.
export function replaceQuery(changes: Record<string, string>, path = location.pathname, from: string | URLSearchParams = location.search) {
  const p = new URLSearchParams(from);
  for (const [k, v] of Object.entries(changes)) {
    if (v) p.set(k, v);
    else p.delete(k);
  }
  const s = p.toString();
  navigate(path + (s ? "?" + s : ""), true);
}

export function useLocation() {
  const [loc, setLoc] = useState(() => location.pathname + location.search);
  useEffect(() => {
    const on = () => setLoc(location.pathname + location.search);
    window.addEventListener("popstate", on);
    window.addEventListener("mg:navigate", on);
    return () => {
      window.removeEventListener("popstate", on);
      window.removeEventListener("mg:navigate", on);
    };
  }, []);
  return loc;
}

// Link navigates inside the app without a reload.
export function Link(props: { href: string; class?: string; children: any; "aria-current"?: "page" | undefined }) {
  return (
    <a
      href={props.href}
      class={props.class}
      aria-current={props["aria-current"]}
      onClick={(e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        navigate(props.href);
      }}
    >
      {props.children}
    </a>
  );
}

// Can is what a screen needs the session's key to be allowed (gatewayd/authz.Decide, reported by the session).
export type Can = "gateway" | "keys" | "models";

// NAV lists the screens of the main navigation: path, label, and what the key must be allowed.
export const NAV: [string, string, Can][] = [
  [BASE, "Groups", "gateway"],
  [BASE + "endpoints", "Endpoints", "gateway"],
  [BASE + "keys", "Workspace keys", "keys"],
  [BASE + "usage", "Usage", "gateway"],
  [BASE + "events", "Billing events", "gateway"],
  [BASE + "models", "Models", "models"],
];

// navFor is the navigation a key sees: the screens it may use.
export function navFor(can: Record<Can, boolean>): [string, string, Can][] {
  return NAV.filter(([, , c]) => can[c]);
}

export type Route =
  | { screen: "tree" }
  | { screen: "group-new"; parent: string | null }
  | { screen: "group"; id: string; key: string }
  | { screen: "endpoints" }
  | { screen: "keys" }
  | { screen: "events" }
  | { screen: "usage" }
  | { screen: "models" }
  | { screen: "none" };

const PLAIN: Record<string, Route["screen"]> = {
  [BASE + "endpoints"]: "endpoints",
  [BASE + "keys"]: "keys",
  [BASE + "events"]: "events",
  [BASE + "usage"]: "usage",
  [BASE + "models"]: "models",
  [BASE]: "tree",
};

// parseRoute is the screen a location (path and query) shows to a key that may use can, with the query and the
// section of the navigation it belongs to. A screen the key may not use shows its first allowed one instead, and
// "none" when it may use no screen (or the path names none).
export function parseRoute(loc: string, can: Record<Can, boolean>): { route: Route; query: URLSearchParams; section: string } {
  let path = loc.split("?")[0];
  const allowed = (p: string) => {
    const item = NAV.find(([href]) => href === p) ?? NAV[0];
    return can[item[2]];
  };
  if (!allowed(path.startsWith(BASE + "groups") ? BASE : path)) path = navFor(can)[0]?.[0] ?? "";
  const query = new URLSearchParams(loc.split("?")[1] ?? "");
  const m = /^\/dashboard\/groups\/([^/]+)$/.exec(path);
  let route: Route;
  if (path === BASE + "groups/new") route = { screen: "group-new", parent: query.get("parent") };
  else if (m) route = { screen: "group", id: decodeURIComponent(m[1]), key: m[1] };
  else route = Object.hasOwn(PLAIN, path) ? ({ screen: PLAIN[path] } as Route) : { screen: "none" };
  const section = m || path === BASE + "groups/new" ? BASE : path;
  return { route, query, section };
}
