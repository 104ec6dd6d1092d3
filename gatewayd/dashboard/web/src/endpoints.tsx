// The endpoints screen: each Endpoint of the workspace with its timeout and its targets, each target's weight and
// priority and its state over the gatewayd replicas (up, or cooling until when, and on which replica; consecutive
// failures; tries of the last hour, ok against failed) and its prices. Its slug links to its usage.
import { api, listAll, refusal } from "./api";
import type { Endpoint, EndpointTargets } from "./api-types";
import { BASE, Link } from "./router";
import { priceText } from "./money";
import { replicaLine, replicasOf, triesSummary, untilText } from "./targetstate";
import { Loading, Page, useAsync, utc } from "./ui";

const enc = encodeURIComponent;

// Row is an Endpoint with its targets' state, or why that could not be read (an Endpoint the replica does not
// serve yet is 404 until its snapshot loads).
interface Row {
  endpoint: Endpoint;
  state?: EndpointTargets;
  error?: string;
}

async function load(): Promise<{ rows: Row[]; at: Date }> {
  const eps = await listAll<Endpoint>("/v1/gateway/endpoints");
  const rows = await Promise.all(
    eps.map((endpoint) =>
      api<EndpointTargets>("GET", `/v1/gateway/endpoints/${enc(endpoint.id)}/targets`).then(
        (state): Row => ({ endpoint, state }),
        (err): Row => ({ endpoint, error: refusal(err) }),
      ),
    ),
  );
  return { rows, at: new Date() };
}

export function EndpointsPage() {
  const data = useAsync(load, []);
  return (
    <Page title="Endpoints" actions={<button type="button" onClick={data.reload} disabled={data.loading}>Refresh</button>}>
      {!data.data ? <Loading error={data.error} /> : data.data.rows.length === 0 ? <p>No endpoints.</p> : (
        <>
          <Replicas rows={data.data.rows} at={data.data.at} />
          {data.data.rows.map((r) => <EndpointSection key={r.endpoint.id} row={r} at={data.data!.at} />)}
        </>
      )}
    </Page>
  );
}

// Replicas says whose state the page shows: cooldown is kept per gatewayd replica, and the answers merge every
// replica that answered; those that did not are named.
function Replicas(props: { rows: Row[]; at: Date }) {
  const { answered, unanswered } = replicasOf(props.rows.flatMap((r) => (r.state ? [r.state] : [])));
  return (
    <>
      <p class="muted">
        Target state as of {utc(props.at.toISOString())}, over gatewayd {answered.length === 1 ? "replica" : "replicas"}{" "}
        <span class="mono">{answered.join(", ") || "—"}</span>. Each replica keeps its own cooldown: a target cooling on any
        replica shows as cooling, until the latest time.
      </p>
      {unanswered.length > 0 && (
        <p class="form-error" role="status">Replicas that did not answer, left out: <span class="mono">{unanswered.join(", ")}</span></p>
      )}
    </>
  );
}

function EndpointSection(props: { row: Row; at: Date }) {
  const { endpoint: e, state: s, error } = props.row;
  const head = `ep-${e.id}`;
  return (
    <section class="endpoint" aria-labelledby={head}>
      <h2 id={head} class="mono"><Link href={`${BASE}usage?slug=${enc(e.slug)}`}>{e.slug}</Link></h2>
      <p class="muted">
        Timeout {e.timeout_ms ? `${e.timeout_ms} ms` : "default"}; updated {utc(e.updated_at)}
        {s && (
          <>
            ; a failed try (an answer of {s.retry.on_status.join(", ")}, or none){" "}
            {s.retry.attempts === 0 ? "is not tried again" : `is followed by up to ${s.retry.attempts} more on other targets`};
            a target leaves the rotation for {s.cooldown.duration_ms / 1000} s after {s.cooldown.failures} failed{" "}
            {s.cooldown.failures === 1 ? "try" : "tries"} in a row
          </>
        )}
        .
      </p>
      {error && <p class="form-error" role="alert">Target state could not be read: {error}</p>}
      <table class="targets">
        <caption class="sr-only">Targets of {e.slug}</caption>
        <thead>
          <tr>
            <th scope="col">Target</th>
            <th scope="col">Provider and URL</th>
            <th scope="col" class="num">Weight</th>
            <th scope="col" class="num">Priority</th>
            <th scope="col">State</th>
            <th scope="col" class="num">Consecutive failures</th>
            <th scope="col" class="num">Tries ok (last hour)</th>
            <th scope="col" class="num">Tries failed (last hour)</th>
            <th scope="col">Price per million tokens</th>
          </tr>
        </thead>
        <tbody>
          {s
            ? s.targets.map((t, i) => {
              const tries = triesSummary(t.tries_last_hour);
              return (
                <tr key={t.name} data-target={t.name}>
                  <th scope="row" class="mono">{t.name}</th>
                  <td class="mono">{t.provider} {t.base_url}{model(e, i)}</td>
                  <td class="num">{t.weight}</td>
                  <td class="num">{t.priority}</td>
                  <td>
                    <span class={`badge target-${t.state}`}>{t.state}</span>
                    {t.state === "cooling" && t.cooling_until && (
                      <> until <time dateTime={t.cooling_until}>{untilText(t.cooling_until, props.at)}</time></>
                    )}
                    {t.replicas.length > 1 && <div class="muted">{replicaLine(t.replicas, props.at)}</div>}
                  </td>
                  <td class="num">{t.consecutive_failures}</td>
                  <td class="num">{tries.ok}</td>
                  <td class="num">{tries.failed}{tries.detail && <span class="muted"> ({tries.detail})</span>}</td>
                  <td class="mono" data-price>{priceText(e.targets[i]?.pricing)}</td>
                </tr>
              );
            })
            : e.targets.map((t, i) => (
              <tr key={i}>
                <th scope="row" class="mono">{t.name ?? `target-${i}`}</th>
                <td class="mono">{t.provider} {t.base_url}{model(e, i)}</td>
                <td class="num">{t.weight ?? 1}</td>
                <td class="num">{t.priority ?? 0}</td>
                <td>unknown</td>
                <td class="num">—</td>
                <td class="num">—</td>
                <td class="num">—</td>
                <td class="mono" data-price>{priceText(t.pricing)}</td>
              </tr>
            ))}
        </tbody>
      </table>
    </section>
  );
}

// model is the model a target calls upstream, from the Endpoint's spec (the same order as its state's targets).
function model(e: Endpoint, i: number): string {
  const m = e.targets[i]?.target_model;
  return m ? ` → ${m}` : "";
}
