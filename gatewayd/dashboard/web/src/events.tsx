// The billing events screen: the workspace's events, newest first, filtered by external id, key prefix and status
// (the filter lives in the URL), and their CSV export.
import { useState } from "preact/hooks";
import { listAll } from "./api";
import { usd } from "./money";
import { BASE, replaceQuery } from "./router";
import { Loading, Page, useAsync, utc } from "./ui";

interface BillingEvent {
  idempotencyKey: string; timestamp: string; requestId: string; modelSlug: string; externalEntityId: string;
  groupId: string; apiKeyPrefix: string; statusCode: number; tokens: { inputTokens?: number; outputTokens?: number };
  costMicroUsd?: number;
}

const CSV_COLUMNS: [string, (e: BillingEvent) => string | number][] = [
  ["timestamp", (e) => e.timestamp], ["request_id", (e) => e.requestId], ["model_slug", (e) => e.modelSlug],
  ["external_entity_id", (e) => e.externalEntityId], ["group_id", (e) => e.groupId], ["api_key_prefix", (e) => e.apiKeyPrefix],
  ["status_code", (e) => e.statusCode], ["input_tokens", (e) => e.tokens?.inputTokens ?? 0], ["output_tokens", (e) => e.tokens?.outputTokens ?? 0],
  ["cost_micro_usd", (e) => e.costMicroUsd ?? 0],
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
    replaceQuery({ external_entity_ids: extIn.trim(), api_keys: keysIn.trim(), status: statusIn.trim() }, BASE + "events", "");
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
          <thead><tr><th scope="col">Time</th><th scope="col">Model</th><th scope="col">External id</th><th scope="col">Key</th><th scope="col">Status</th><th scope="col">Tokens in/out</th><th scope="col" class="num">Cost</th></tr></thead>
          <tbody>
            {events.slice(0, 500).map((e) => (
              <tr key={e.idempotencyKey}>
                <td>{utc(e.timestamp)}</td><td class="mono">{e.modelSlug}</td><td class="mono">{e.externalEntityId}</td>
                <td class="mono">{e.apiKeyPrefix}</td><td class={e.statusCode >= 400 ? "bad" : undefined}>{e.statusCode}</td>
                <td class="num">{e.tokens?.inputTokens ?? 0} / {e.tokens?.outputTokens ?? 0}</td>
                <td class="num" data-cost={e.costMicroUsd ?? 0}>{usd(e.costMicroUsd ?? 0)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Page>
  );
}
