// The usage charts: per model slug, the calls (the 429s among them) and the tokens or their cost over the last hour
// or day, as plain SVG bar charts with the group's limit (or budget) drawn as a labelled line, each with a title, a
// description and a table of the same numbers. The group page shows its group's slugs; the usage page every slug
// of the workspace.
import { api } from "./api";
import type { Usage, UsageBucket, UsageSeries } from "./api-types";
import { bucketName, type LimitLine, limitLines, scaleTop } from "./chart";
import { usd } from "./money";
import { groupPath, Link, replaceQuery, useLocation } from "./router";
import { groupDigits } from "./shorthand";
import { Loading, Page, useAsync } from "./ui";

type Win = "1h" | "24h";
const WINDOWS: [Win, string][] = [["1h", "Last hour"], ["24h", "Last day"]];

// useWindow is the chart window held in the page's query (?window=), so a chart can be linked and reloaded.
function useWindow(): [Win, (w: Win) => void] {
  const loc = useLocation();
  const q = new URLSearchParams(loc.split("?")[1] ?? "");
  const w: Win = q.get("window") === "24h" ? "24h" : "1h";
  return [
    w,
    (next) => replaceQuery({ window: next === "1h" ? "" : next }),
  ];
}

// Measure is what the second chart of each slug draws: its tokens, or what they cost. Held in ?measure=, as the window.
type Measure = "tokens" | "cost";
const MEASURES: [Measure, string][] = [["tokens", "Tokens"], ["cost", "Cost"]];

function useMeasure(): [Measure, (m: Measure) => void] {
  const loc = useLocation();
  const q = new URLSearchParams(loc.split("?")[1] ?? "");
  return [q.get("measure") === "cost" ? "cost" : "tokens", (next) => replaceQuery({ measure: next === "tokens" ? "" : next })];
}

function MeasureToggle(props: { value: Measure; onChange: (m: Measure) => void }) {
  return (
    <div class="toggle" role="group" aria-label="Tokens or cost">
      {MEASURES.map(([m, label]) => (
        <button key={m} type="button" aria-pressed={props.value === m ? "true" : "false"} onClick={() => props.onChange(m)}>
          {label}
        </button>
      ))}
    </div>
  );
}

function WindowToggle(props: { value: Win; onChange: (w: Win) => void }) {
  return (
    <div class="toggle" role="group" aria-label="Chart window">
      {WINDOWS.map(([w, label]) => (
        <button key={w} type="button" aria-pressed={props.value === w ? "true" : "false"} onClick={() => props.onChange(w)}>
          {label}
        </button>
      ))}
    </div>
  );
}

interface Part { label: string; cls: string; value: (b: UsageBucket) => number }

const W = 640, H = 200, LEFT = 52, RIGHT = 8, TOP = 14, BOTTOM = 26;

// Chart draws buckets as stacked bars of parts, with the limit lines over them. Every bar carries its numbers in
// data attributes, and the description says what the chart shows, for a screen reader and for the browser test.
function Chart(props: { id: string; title: string; desc: string; kind: string; bucketSeconds: number; buckets: UsageBucket[]; parts: Part[]; lines: LimitLine[]; format?: (v: number) => string }) {
  const { buckets, parts, lines } = props;
  const format = props.format ?? ((v: number) => groupDigits(Math.round(v)));
  const top = scaleTop(buckets.map((b) => parts.reduce((n, p) => n + p.value(b), 0)), lines);
  const plotW = W - LEFT - RIGHT, plotH = H - TOP - BOTTOM;
  const y = (v: number) => TOP + plotH - (v / top) * plotH;
  const bw = plotW / Math.max(1, buckets.length);
  const ticks = [0, top / 2, top];
  const labelled = [0, Math.floor(buckets.length / 2), buckets.length - 1];
  return (
    <figure class="chart">
      <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={`${props.id}-title ${props.id}-desc`} data-chart={props.kind} data-top={top}>
        <title id={`${props.id}-title`}>{props.title}</title>
        <desc id={`${props.id}-desc`}>{props.desc}</desc>
        {ticks.map((t) => (
          <g key={t} class="axis">
            <line class="gridline" x1={LEFT} x2={W - RIGHT} y1={y(t)} y2={y(t)} />
            <text x={LEFT - 6} y={y(t) + 4} text-anchor="end">{format(t)}</text>
          </g>
        ))}
        {buckets.map((b, i) => {
          let acc = 0;
          return (
            <g key={b.start} class="bucket" data-start={b.start} data-requests={b.requests} data-throttled={b.throttled} data-input-tokens={b.input_tokens} data-output-tokens={b.output_tokens} data-cost={b.cost_micro_usd}>
              {parts.map((p) => {
                const v = p.value(b);
                const y0 = y(acc), y1 = y(acc + v);
                acc += v;
                return v > 0 ? <rect key={p.cls} class={p.cls} x={LEFT + i * bw + 0.5} width={Math.max(1, bw - 1)} y={y1} height={Math.max(1, y0 - y1)} /> : null;
              })}
            </g>
          );
        })}
        {labelled.filter((i, k) => i >= 0 && labelled.indexOf(i) === k).map((i) => (
          <text key={i} class="axis" x={LEFT + (i + 0.5) * bw} y={H - 8} text-anchor={i === 0 ? "start" : i === buckets.length - 1 ? "end" : "middle"}>
            {bucketName(buckets[i].start, props.bucketSeconds)}
          </text>
        ))}
        {lines.map((l) => (
          <g key={l.unit} class="limit" data-limit-unit={l.unit} data-per-bucket={l.value}>
            <line class="limit-line" x1={LEFT} x2={W - RIGHT} y1={y(l.value)} y2={y(l.value)} />
            <text class="limit-label" x={LEFT + 6} y={y(l.value) - 5}>Limit: {l.label}</text>
          </g>
        ))}
      </svg>
      <figcaption class="legend">
        {parts.map((p) => (
          <span key={p.cls}><span class={`swatch ${p.cls}`} aria-hidden="true" /> {p.label}</span>
        ))}
        {lines.length > 0 && <span><span class="swatch limit-swatch" aria-hidden="true" /> limit, as it applies to one bar</span>}
      </figcaption>
    </figure>
  );
}

const REQUEST_PARTS: Part[] = [
  { label: "answered", cls: "bar-ok", value: (b) => b.requests - b.throttled },
  { label: "refused with 429", cls: "bar-429", value: (b) => b.throttled },
];
const TOKEN_PARTS: Part[] = [
  { label: "input tokens", cls: "bar-in", value: (b) => b.input_tokens },
  { label: "output tokens", cls: "bar-out", value: (b) => b.output_tokens },
];
const COST_PARTS: Part[] = [{ label: "cost, at the answering targets' prices", cls: "bar-cost", value: (b) => b.cost_micro_usd }];

function linesText(lines: LimitLine[]): string {
  return lines.length ? ` Limit line${lines.length > 1 ? "s" : ""}: ${lines.map((l) => l.label).join("; ")}.` : " No limit of this type applies.";
}

// SeriesCard is one slug: its totals, the requests chart, the tokens or cost chart and the table of all.
function SeriesCard(props: { s: UsageSeries; usage: Usage; idBase: string; group: boolean; measure: Measure }) {
  const { s, usage } = props;
  const per = usage.bucket_seconds === 60 ? "minute" : "half hour";
  const span = usage.window === "1h" ? "the last hour" : "the last day";
  const reqLines = props.group ? limitLines(s.limits, "REQUEST", usage.bucket_seconds) : [];
  const tokLines = props.group ? limitLines(s.limits, "TOKEN", usage.bucket_seconds) : [];
  const costLines = props.group ? limitLines(s.limits, "COST", usage.bucket_seconds) : [];
  const t = s.totals;
  const busy = s.buckets.filter((b) => b.requests > 0);
  const id = `${props.idBase}-${s.slug.replace(/[^A-Za-z0-9_-]/g, "_")}`;
  return (
    <section class="card usage-series" aria-labelledby={`${id}-h`} data-slug={s.slug}>
      <h3 id={`${id}-h`} class="mono">{s.slug}</h3>
      <p class="totals" data-requests={t.requests} data-throttled={t.throttled} data-input-tokens={t.input_tokens} data-output-tokens={t.output_tokens} data-cost={t.cost_micro_usd}>
        Over {span}: {groupDigits(t.requests)} requests, {groupDigits(t.throttled)} refused with 429, {groupDigits(t.input_tokens + t.output_tokens)} tokens
        ({groupDigits(t.input_tokens)} in, {groupDigits(t.output_tokens)} out), costing {usd(t.cost_micro_usd)}.
      </p>
      <div class="usage-charts">
        <Chart
          id={`${id}-req`}
          kind="requests"
          title={`Requests of ${s.slug} per ${per}, ${span}`}
          desc={`${t.requests} requests, ${t.throttled} of them refused with 429.${props.group ? linesText(reqLines) : ""}`}
          bucketSeconds={usage.bucket_seconds}
          buckets={s.buckets}
          parts={REQUEST_PARTS}
          lines={reqLines}
        />
        {props.measure === "cost" ? (
          <Chart
            id={`${id}-cost`}
            kind="cost"
            title={`Cost of ${s.slug} per ${per}, ${span}`}
            desc={`${usd(t.cost_micro_usd)} in all.${props.group ? linesText(costLines) : ""}`}
            bucketSeconds={usage.bucket_seconds}
            buckets={s.buckets}
            parts={COST_PARTS}
            lines={costLines}
            format={usd}
          />
        ) : (
          <Chart
            id={`${id}-tok`}
            kind="tokens"
            title={`Tokens of ${s.slug} per ${per}, ${span}`}
            desc={`${t.input_tokens} input and ${t.output_tokens} output tokens.${props.group ? linesText(tokLines) : ""}`}
            bucketSeconds={usage.bucket_seconds}
            buckets={s.buckets}
            parts={TOKEN_PARTS}
            lines={tokLines}
          />
        )}
      </div>
      <details>
        <summary>The numbers as a table</summary>
        {busy.length === 0 ? <p>No calls in {span}.</p> : (
          <table class="usage-table">
            <caption>Calls of {s.slug} per {per} (UTC), {span}; periods without calls are left out</caption>
            <thead><tr><th scope="col">Period from</th><th scope="col" class="num">Requests</th><th scope="col" class="num">429s</th><th scope="col" class="num">Input tokens</th><th scope="col" class="num">Output tokens</th><th scope="col" class="num">Cost (USD)</th></tr></thead>
            <tbody>
              {busy.map((b) => (
                <tr key={b.start} data-start={b.start}>
                  <td>{bucketName(b.start, usage.bucket_seconds)}</td>
                  <td class="num">{groupDigits(b.requests)}</td><td class="num">{groupDigits(b.throttled)}</td>
                  <td class="num">{groupDigits(b.input_tokens)}</td><td class="num">{groupDigits(b.output_tokens)}</td>
                  <td class="num" data-cost={b.cost_micro_usd}>{usd(b.cost_micro_usd)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        {reqLines.length + tokLines.length + costLines.length > 0 && (
          <ul class="limits-list">
            {[...reqLines.map((l) => ["Requests", l] as const), ...tokLines.map((l) => ["Tokens", l] as const), ...costLines.map((l) => ["Cost", l] as const)].map(([what, l]) => (
              <li key={what + l.unit}>{what} limit: {l.label}, set on <Link href={groupPath(l.source)}>{l.source}</Link></li>
            ))}
          </ul>
        )}
      </details>
    </section>
  );
}

function fetchUsage(win: Win, group?: string, slug?: string): Promise<Usage> {
  const q = new URLSearchParams({ window: win });
  if (group) q.set("group_id", group);
  if (slug) q.set("slug", slug);
  return api<Usage>("GET", `/v1/gateway/usage?${q}`);
}

// GroupUsageCharts is the group page's usage section: the group's slugs, with its limits.
export function GroupUsageCharts(props: { id: string }) {
  const [win, setWin] = useWindow();
  const [measure, setMeasure] = useMeasure();
  const data = useAsync(() => fetchUsage(win, props.id), [props.id, win]);
  return (
    <section aria-labelledby="charts-title">
      <div class="section-head">
        <h2 id="charts-title">Usage per model</h2>
        <MeasureToggle value={measure} onChange={setMeasure} />
        <WindowToggle value={win} onChange={setWin} />
      </div>
      {!data.data ? <Loading error={data.error} /> : data.data.series.length === 0 ? <p>No models.</p> : (
        data.data.series.map((s) => <SeriesCard key={s.slug} s={s} usage={data.data!} idBase="g" group measure={measure} />)
      )}
    </section>
  );
}

// UsagePage is every slug of the workspace, every group's calls together (?slug= narrows it to one).
export function UsagePage(props: { query: URLSearchParams }) {
  const [win, setWin] = useWindow();
  const [measure, setMeasure] = useMeasure();
  const slug = props.query.get("slug") ?? "";
  const data = useAsync(() => fetchUsage(win), [win]);
  const all = data.data?.series ?? [];
  const shown = slug ? all.filter((s) => s.slug === slug) : all;
  return (
    <Page title="Usage" actions={<><MeasureToggle value={measure} onChange={setMeasure} /><WindowToggle value={win} onChange={setWin} /></>}>
      <p class="hint">Every group's calls of each model together. Limits belong to groups: a group's page draws its limits on its charts.</p>
      <div class="toolbar">
        <label for="usage-slug">Model</label>
        <select
          id="usage-slug"
          value={slug}
          onChange={(e) => replaceQuery({ slug: (e.target as HTMLSelectElement).value })}
        >
          <option value="">All models</option>
          {all.map((s) => <option key={s.slug} value={s.slug}>{s.slug}</option>)}
        </select>
      </div>
      {!data.data ? <Loading error={data.error} /> : shown.length === 0 ? <p>No models.</p> : (
        shown.map((s) => <SeriesCard key={s.slug} s={s} usage={data.data!} idBase="w" group={false} measure={measure} />)
      )}
    </Page>
  );
}
