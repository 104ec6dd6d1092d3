// The list screens: endpoints, billing events (filter and CSV export), and models with their
// deployments and environments (activate, promote, and a deployment's logs).
import { useState } from "preact/hooks";
import { api, ApiError, listAll, refusal } from "./api";
import type { DeploymentList, Endpoint, EnvironmentList, Logs, LogsRequest, Model, ModelList } from "./api-types";
import { BASE, Link, navigate } from "./router";
import { Confirm, FieldMsg, Loading, Page, useAsync, utc } from "./ui";

const enc = encodeURIComponent;

export function EndpointsPage() {
  const data = useAsync(() => listAll<Endpoint>("/v1/gateway/endpoints"), []);
  return (
    <Page title="Endpoints">
      {!data.data ? <Loading error={data.error} /> : data.data.length === 0 ? <p>No endpoints.</p> : (
        <table>
          <caption class="sr-only">Endpoints of the workspace</caption>
          <thead><tr><th scope="col">Slug</th><th scope="col">Targets</th><th scope="col">Timeout</th><th scope="col">Updated</th></tr></thead>
          <tbody>
            {data.data.map((e) => (
              <tr key={e.id}>
                <td class="mono"><Link href={`${BASE}usage?slug=${enc(e.slug)}`}>{e.slug}</Link></td>
                <td>{e.targets.map((t, i) => <div key={i} class="mono">{t.provider} {t.base_url}{t.target_model ? ` → ${t.target_model}` : ""}</div>)}</td>
                <td>{e.timeout_ms ? `${e.timeout_ms} ms` : "default"}</td>
                <td>{utc(e.updated_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Page>
  );
}

interface BillingEvent {
  idempotencyKey: string; timestamp: string; requestId: string; modelSlug: string; externalEntityId: string;
  groupId: string; apiKeyPrefix: string; statusCode: number; tokens: { inputTokens?: number; outputTokens?: number };
}

const CSV_COLUMNS: [string, (e: BillingEvent) => string | number][] = [
  ["timestamp", (e) => e.timestamp], ["request_id", (e) => e.requestId], ["model_slug", (e) => e.modelSlug],
  ["external_entity_id", (e) => e.externalEntityId], ["group_id", (e) => e.groupId], ["api_key_prefix", (e) => e.apiKeyPrefix],
  ["status_code", (e) => e.statusCode], ["input_tokens", (e) => e.tokens?.inputTokens ?? 0], ["output_tokens", (e) => e.tokens?.outputTokens ?? 0],
];

export function toCSV(events: BillingEvent[]): string {
  const cell = (v: string | number) => {
    const s = String(v);
    // Quote what needs it, and defuse cells a spreadsheet would run as a formula.
    const safe = /^[=+\-@\t\r]/.test(s) ? "'" + s : s;
    return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
  };
  return [CSV_COLUMNS.map(([h]) => h).join(","), ...events.map((e) => CSV_COLUMNS.map(([, f]) => cell(f(e))).join(","))].join("\r\n") + "\r\n";
}

export function EventsPage(props: { query: URLSearchParams }) {
  const ext = props.query.get("external_entity_ids") ?? "";
  const keys = props.query.get("api_keys") ?? "";
  const status = props.query.get("status") ?? "";
  const [extIn, setExtIn] = useState(ext);
  const [keysIn, setKeysIn] = useState(keys);
  const [statusIn, setStatusIn] = useState(status);
  const data = useAsync(async () => {
    const p = new URLSearchParams({ limit: "1000" });
    if (ext) p.set("external_entity_ids", ext);
    if (keys) p.set("api_keys", keys);
    return listAll<BillingEvent>(`/v1/gateway/events?${p}`);
  }, [ext, keys]);
  const events = (data.data ?? []).filter((e) => !status || String(e.statusCode) === status).reverse();
  function apply(e: Event) {
    e.preventDefault();
    const p = new URLSearchParams();
    if (extIn.trim()) p.set("external_entity_ids", extIn.trim());
    if (keysIn.trim()) p.set("api_keys", keysIn.trim());
    if (statusIn.trim()) p.set("status", statusIn.trim());
    navigate(`${BASE}events${p.toString() ? "?" + p : ""}`, true);
  }
  function exportCSV() {
    const url = URL.createObjectURL(new Blob([toCSV(events)], { type: "text/csv" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = `billing-events-${new Date().toISOString().slice(0, 19).replace(/:/g, "")}Z.csv`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
  return (
    <Page title="Billing events" actions={<button type="button" onClick={exportCSV} disabled={!data.data}>Export CSV</button>}>
      <form class="toolbar" onSubmit={apply} aria-label="Filter events">
        <label for="f-ext">External ids</label>
        <input id="f-ext" value={extIn} onInput={(e) => setExtIn((e.target as HTMLInputElement).value)} placeholder="comma separated" />
        <label for="f-keys">Key prefixes</label>
        <input id="f-keys" value={keysIn} onInput={(e) => setKeysIn((e.target as HTMLInputElement).value)} placeholder="comma separated" />
        <label for="f-status">Status</label>
        <input id="f-status" value={statusIn} onInput={(e) => setStatusIn((e.target as HTMLInputElement).value)} inputMode="numeric" placeholder="e.g. 429" />
        <button type="submit">Filter</button>
      </form>
      {!data.data ? <Loading error={data.error} /> : events.length === 0 ? <p>No events.</p> : (
        <table>
          <caption class="sr-only">Billing events, newest first</caption>
          <thead><tr><th scope="col">Time</th><th scope="col">Model</th><th scope="col">External id</th><th scope="col">Key</th><th scope="col">Status</th><th scope="col">Tokens in/out</th></tr></thead>
          <tbody>
            {events.slice(0, 500).map((e) => (
              <tr key={e.idempotencyKey}>
                <td>{utc(e.timestamp)}</td><td class="mono">{e.modelSlug}</td><td class="mono">{e.externalEntityId}</td>
                <td class="mono">{e.apiKeyPrefix}</td><td class={e.statusCode >= 400 ? "bad" : undefined}>{e.statusCode}</td>
                <td class="num">{e.tokens?.inputTokens ?? 0} / {e.tokens?.outputTokens ?? 0}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Page>
  );
}

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"] as const;

// DeploymentLogs shows the newest lines of a deployment's logs (its Events, the calls every gatewayd replica
// made to it, its pods' lines), filtered by level and a regular expression; a refusal (a pattern that does not
// compile, say) shows next to its field in the server's words.
function DeploymentLogs(props: { model: string; deployment: string; name: string }) {
  const [level, setLevel] = useState<LogsRequest["min_level"]>("DEBUG");
  const [search, setSearch] = useState("");
  const [query, setQuery] = useState<LogsRequest>({ limit: 100, direction: "desc", min_level: "DEBUG" });
  const data = useAsync(
    () => api<Logs>("POST", `/v1/models/${enc(props.model)}/deployments/${enc(props.deployment)}/logs`, query),
    [props.model, props.deployment, query],
  );
  // The last lines stay while a new filter loads; a refusal shows until the next answer.
  const logs = data.data;
  const err = data.loading ? undefined : (data.cause as ApiError | undefined);
  function apply(e: Event) {
    e.preventDefault();
    // A new object each time, so Show also refreshes an unchanged filter.
    setQuery({ limit: 100, direction: "desc", min_level: level, ...(search.trim() ? { search_pattern: search.trim() } : {}) });
  }
  const searchMsg = err?.forField("search_pattern");
  return (
    <section class="logs" aria-label={`Logs of ${props.name}`}>
      <h3>Logs of {props.name}</h3>
      <form class="toolbar" onSubmit={apply} aria-label={`Filter the logs of ${props.name}`}>
        <label for="logs-level">Level at least</label>
        <select id="logs-level" value={level} onChange={(e) => setLevel((e.target as HTMLSelectElement).value as LogsRequest["min_level"])}>
          {LEVELS.map((l) => <option key={l} value={l}>{l}</option>)}
        </select>
        <label for="logs-search">Search (regular expression)</label>
        <input id="logs-search" type="search" value={search} onInput={(e) => setSearch((e.target as HTMLInputElement).value)}
          aria-invalid={searchMsg ? "true" : "false"} aria-describedby="logs-search-error" placeholder="request id or message" />
        <button type="submit">Show</button>
      </form>
      <FieldMsg id="logs-search-error" msg={searchMsg} />
      {err && !searchMsg && <p class="form-error" role="alert">{refusal(err)}</p>}
      {!err && !logs && <Loading />}
      {logs && (logs.logs.length === 0 ? <p>No lines.</p> : (
        <table class="log-lines">
          <caption class="sr-only">Newest lines first</caption>
          <thead><tr><th scope="col">Time</th><th scope="col">Level</th><th scope="col">Replica</th><th scope="col">Request id</th><th scope="col">Message</th></tr></thead>
          <tbody>
            {logs.logs.map((l, i) => (
              <tr key={i}>
                <td>{utc(l.timestamp)}</td><td class={l.level === "ERROR" ? "bad" : ""}>{l.level}</td>
                <td class="mono">{l.replica ?? "—"}</td><td class="mono">{l.request_id ?? "—"}</td><td class="mono">{l.message}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ))}
    </section>
  );
}

function ModelDetail(props: { model: Model }) {
  const m = props.model;
  const data = useAsync(
    () => Promise.all([
      api<DeploymentList>("GET", `/v1/models/${enc(m.id)}/deployments`),
      api<EnvironmentList>("GET", `/v1/models/${enc(m.id)}/environments`),
    ]),
    [m.id],
  );
  const [msg, setMsg] = useState("");
  const [promote, setPromote] = useState<{ env: string; dep: string } | null>(null);
  const [logsOf, setLogsOf] = useState<string | null>(null);
  async function act(what: string, path: string, body?: unknown) {
    try {
      const r = await api<any>("POST", path, body);
      setMsg(`${what}: ${r && "no_op" in r ? (r.no_op ? "already so" : "done") : "done"}.`);
      data.reload();
    } catch (err) {
      setMsg(`${what}: ${(err as ApiError).message}`);
    }
  }
  if (!data.data) return <Loading error={data.error} />;
  const [deps, envs] = data.data;
  return (
    <div class="model-detail">
      {msg && <p role="status" class="notice">{msg}</p>}
      <h3>Environments</h3>
      {envs.environments.length === 0 ? <p>No environments.</p> : (
        <table>
          <caption class="sr-only">Environments of {m.name}</caption>
          <thead><tr><th scope="col">Name</th><th scope="col">Deployment</th><th scope="col">Status</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {envs.environments.map((e) => (
              <tr key={e.name}>
                <td>{e.name}</td><td class="mono">{e.current_deployment?.name ?? e.current_deployment?.id}</td><td>{e.current_deployment?.status}</td>
                <td class="actions">
                  <button type="button" onClick={() => act(`Activate ${e.name}`, `/v1/models/${enc(m.id)}/environments/${enc(e.name)}/activate`)}>Activate</button>
                  <label class="sr-only" for={`promote-${e.name}`}>Deployment to promote to {e.name}</label>
                  <select id={`promote-${e.name}`} onChange={(ev) => { const v = (ev.target as HTMLSelectElement).value; if (v) setPromote({ env: e.name, dep: v }); }} value="">
                    <option value="">Promote…</option>
                    {deps.deployments.filter((d) => d.id !== e.current_deployment?.id).map((d) => <option key={d.id} value={d.id}>{d.name}</option>)}
                  </select>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h3>Deployments</h3>
      <table>
        <caption class="sr-only">Deployments of {m.name}</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Replicas</th><th scope="col">Environment</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>
          {deps.deployments.map((d) => (
            <tr key={d.id}>
              <td class="mono">{d.name}</td><td>{d.status}</td><td class="num">{d.active_replica_count}</td><td>{d.environment ?? "—"}</td>
              <td class="actions">
                <button type="button" onClick={() => act(`Activate ${d.name}`, `/v1/models/${enc(m.id)}/deployments/${enc(d.id)}/activate`)}>Activate</button>
                <button type="button" aria-pressed={logsOf === d.id ? "true" : "false"} onClick={() => setLogsOf(logsOf === d.id ? null : d.id)}>Logs</button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {logsOf && <DeploymentLogs model={m.id} deployment={logsOf} name={deps.deployments.find((d) => d.id === logsOf)?.name ?? logsOf} />}
      <Confirm open={!!promote} title={`Promote to ${promote?.env ?? ""}?`} confirmLabel="Promote" onCancel={() => setPromote(null)}
        onConfirm={() => { const p = promote!; setPromote(null); act(`Promote to ${p.env}`, `/v1/models/${enc(m.id)}/environments/${enc(p.env)}/promote`, { deployment_id: p.dep }); }}>
        <p>{promote?.env} will serve deployment {deps.deployments.find((d) => d.id === promote?.dep)?.name}.</p>
      </Confirm>
    </div>
  );
}

export function ModelsPage() {
  const data = useAsync(() => api<ModelList>("GET", "/v1/models"), []);
  const [open, setOpen] = useState<string | null>(null);
  const models = data.data?.models ?? [];
  return (
    <Page title="Models">
      {!data.data ? <Loading error={data.error} /> : models.length === 0 ? <p>No models.</p> : (
        <ul class="models">
          {models.map((m) => (
            <li key={m.id} class="card">
              <h2>
                <button type="button" class="disclosure" aria-expanded={open === m.id ? "true" : "false"} onClick={() => setOpen(open === m.id ? null : m.id)}>
                  {m.name} <span class="muted mono">({m.id}, {m.deployments_count} deployments)</span>
                </button>
              </h2>
              {open === m.id && <ModelDetail model={m} />}
            </li>
          ))}
        </ul>
      )}
    </Page>
  );
}
