// The models screen: each model with its environments and deployments (activate, promote), and a deployment's
// logs (logs.tsx).
import { useState } from "preact/hooks";
import { api, ApiError } from "./api";
import type { DeploymentList, EnvironmentList, Model, ModelList } from "./api-types";
import { DeploymentLogs } from "./logs";
import { Confirm, Loading, Page, useAsync } from "./ui";

const enc = encodeURIComponent;

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
