// The shell: session, theme, the navigation, and each route of the router (router.tsx) mapped to its screen.
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, setUnauthorizedHandler, type Who } from "./api";
import { EndpointsPage } from "./endpoints";
import { EventsPage } from "./events";
import { GroupCreate, GroupPage } from "./group";
import { KeysPage } from "./keys";
import { ModelsPage } from "./models";
import { Link, navFor, parseRoute, useLocation } from "./router";
import { GroupTree } from "./tree";
import { UsagePage } from "./usage";

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
  const nav = navFor(who.can);
  const { route, query, section } = parseRoute(loc, who.can);
  let page;
  switch (route.screen) {
    case "group-new": page = <GroupCreate parent={route.parent} />; break;
    case "group": page = <GroupPage id={route.id} key={route.key} />; break;
    case "endpoints": page = <EndpointsPage />; break;
    case "keys": page = <KeysPage who={who.can} />; break;
    case "events": page = <EventsPage query={query} />; break;
    case "usage": page = <UsagePage query={query} />; break;
    case "models": page = <ModelsPage />; break;
    case "tree": page = <GroupTree query={query} />; break;
    case "none": page = <main id="main"><h1>Nothing to show</h1><p>This key ({who.key_type}) may not use any dashboard screen.</p></main>; break;
    default: {
      // Every screen of router.tsx's Route has its case: a new one without it does not compile.
      const unhandled: never = route;
      return unhandled;
    }
  }
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
