// The shell: session, theme, navigation and the router. Routes live in the path under /dashboard/ and their state
// (search, filters) in the query, so every screen can be linked and reloaded.
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, setUnauthorizedHandler, type Who } from "./api";
import { GroupTree } from "./tree";
import { GroupPage, GroupCreate } from "./group";
import { EndpointsPage, EventsPage, ModelsPage } from "./lists";
import { KeysPage } from "./keys";
import { UsagePage } from "./usage";

export const BASE = "/dashboard/";

export function navigate(to: string, replace = false) {
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  window.dispatchEvent(new Event("mg:navigate"));
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

type Theme = "system" | "light" | "dark";

function applyTheme(t: Theme) {
  if (t === "system") document.documentElement.removeAttribute("data-theme");
  else document.documentElement.setAttribute("data-theme", t);
}

function ThemeToggle() {
  // Only the theme choice is kept in storage; nothing secret ever is.
  const [theme, setTheme] = useState<Theme>(() => (localStorage.getItem("mg-theme") as Theme) || "system");
  useEffect(() => {
    applyTheme(theme);
    if (theme === "system") localStorage.removeItem("mg-theme");
    else localStorage.setItem("mg-theme", theme);
  }, [theme]);
  const next: Record<Theme, Theme> = { system: "light", light: "dark", dark: "system" };
  return (
    <button type="button" class="theme" onClick={() => setTheme(next[theme])} aria-label={`Theme: ${theme}. Switch to ${next[theme]}.`}>
      Theme: {theme}
    </button>
  );
}

function Login(props: { onLogin: (w: Who) => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      const who = await api<Who>("POST", "/dashboard/api/login", { api_key: key });
      setKey("");
      props.onLogin(who);
    } catch (err) {
      const ae = err as ApiError;
      setError(ae.forField?.("api_key") ?? ae.message);
    } finally {
      setBusy(false);
    }
  }
  return (
    <main id="main" class="login">
      <h1>modelgate</h1>
      <form onSubmit={submit} class="card" aria-labelledby="login-title">
        <h2 id="login-title">Sign in with a workspace key</h2>
        <label for="api-key">Workspace API key</label>
        <input
          id="api-key"
          name="api_key"
          type="password"
          autocomplete="off"
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
          aria-invalid={error ? "true" : undefined}
          aria-describedby={error ? "api-key-error" : "api-key-help"}
          required
        />
        <p id="api-key-help" class="hint">The key stays on the server, sealed in an HttpOnly session cookie.</p>
        {error && (
          <p id="api-key-error" class="field-error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy}>
          Sign in
        </button>
      </form>
    </main>
  );
}

type Can = "gateway" | "keys" | "models";
// NAV lists the screens with what the key must be allowed (gatewayd/authz.Decide, reported by the session).
const NAV: [string, string, Can][] = [
  [BASE, "Groups", "gateway"],
  [BASE + "endpoints", "Endpoints", "gateway"],
  [BASE + "keys", "Workspace keys", "keys"],
  [BASE + "usage", "Usage", "gateway"],
  [BASE + "events", "Billing events", "gateway"],
  [BASE + "models", "Models", "models"],
];

export function App() {
  const loc = useLocation();
  const [who, setWho] = useState<Who | null | undefined>(undefined);
  useEffect(() => {
    setUnauthorizedHandler(() => setWho(null));
    api<Who | undefined>("GET", "/dashboard/api/session").then((w) => setWho(w ?? null), () => setWho(null));
  }, []);
  useEffect(() => {
    const h = document.getElementById("main")?.querySelector("h1");
    if (h) document.title = `${h.textContent} · modelgate`;
  });
  if (who === undefined) return <main id="main" aria-busy="true"><p>Loading…</p></main>;
  if (who === null) return <><ThemeBar /><Login onLogin={setWho} /></>;
  const nav = NAV.filter(([, , can]) => who.can[can]);
  let path = loc.split("?")[0];
  const allowed = (p: string) => {
    const item = NAV.find(([href]) => href === p) ?? NAV[0];
    return who.can[item[2]];
  };
  if (!allowed(path.startsWith(BASE + "groups") ? BASE : path)) path = nav[0]?.[0] ?? "";
  const query = new URLSearchParams(loc.split("?")[1] ?? "");
  let page;
  const m = /^\/dashboard\/groups\/([^/]+)$/.exec(path);
  if (path === BASE + "groups/new") page = <GroupCreate parent={query.get("parent")} />;
  else if (m) page = <GroupPage id={decodeURIComponent(m[1])} key={m[1]} />;
  else if (path === BASE + "endpoints") page = <EndpointsPage />;
  else if (path === BASE + "keys") page = <KeysPage who={who.can} />;
  else if (path === BASE + "events") page = <EventsPage query={query} />;
  else if (path === BASE + "usage") page = <UsagePage query={query} />;
  else if (path === BASE + "models") page = <ModelsPage />;
  else if (path === BASE) page = <GroupTree query={query} />;
  else page = <main id="main"><h1>Nothing to show</h1><p>This key ({who.key_type}) may not use any dashboard screen.</p></main>;
  const section = m || path === BASE + "groups/new" ? BASE : path;
  return (
    <>
      <a href="#main" class="skip">Skip to content</a>
      <header class="top">
        <span class="brand">modelgate</span>
        <nav aria-label="Main">
          <ul>
            {nav.map(([href, label]) => (
              <li key={href}>
                <Link href={href} aria-current={section === href ? "page" : undefined}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <span class="who">
          {who.key_name || who.key_prefix} <span class="muted">({who.key_type}, {who.namespace})</span>
        </span>
        <ThemeToggle />
        <button
          type="button"
          onClick={async () => {
            await api("POST", "/dashboard/api/logout").catch(() => {});
            setWho(null);
          }}
        >
          Sign out
        </button>
      </header>
      {page}
    </>
  );
}

function ThemeBar() {
  return (
    <header class="top">
      <span class="brand">modelgate</span>
      <span class="spacer" />
      <ThemeToggle />
    </header>
  );
}
