// The endpoints screen: each Endpoint of the workspace with its targets and timeout; its slug links to its usage.
import { listAll } from "./api";
import type { Endpoint } from "./api-types";
import { BASE, Link } from "./router";
import { Loading, Page, useAsync, utc } from "./ui";

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
