// A deployment's logs, as the models screen shows them under the deployment.
import { useState } from "preact/hooks";
import { api, ApiError, refusal } from "./api";
import type { Logs, LogsRequest } from "./api-types";
import { FieldMsg, Loading, useAsync, utc } from "./ui";

const enc = encodeURIComponent;

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"] as const;

// DeploymentLogs shows the newest lines of a deployment's logs (its Events, the calls every gatewayd replica
// made to it, its pods' lines), filtered by level and a regular expression; a refusal (a pattern that does not
// compile, say) shows next to its field in the server's words.
export function DeploymentLogs(props: { model: string; deployment: string; name: string }) {
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
