// Small shared pieces: the page frame, async loading, confirmation dialogs, field messages.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";

export function Page(props: { title: string; actions?: ComponentChildren; children: ComponentChildren }) {
  return (
    <main id="main" tabIndex={-1}>
      <div class="page-head">
        <h1>{props.title}</h1>
        {props.actions && <div class="actions">{props.actions}</div>}
      </div>
      {props.children}
    </main>
  );
}

// useAsync runs load when deps change (or on reload). error is the failure's message; cause is the failure
// itself, for a form that shows an ApiError's field messages next to their fields.
export function useAsync<T>(load: () => Promise<T>, deps: unknown[]) {
  const [state, setState] = useState<{ data?: T; error?: string; cause?: unknown; loading: boolean }>({ loading: true });
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, loading: false }),
      (e) => live && setState({ error: String(e?.message ?? e), cause: e, loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  const reload = useCallback(() => setN((x) => x + 1), []);
  return { ...state, reload };
}

export function Loading(props: { error?: string }) {
  if (props.error) return <p class="form-error" role="alert">{props.error}</p>;
  return <p aria-busy="true">Loading…</p>;
}

// Confirm is a modal dialog (the native <dialog>, so focus is trapped and Escape cancels).
export function Confirm(props: {
  open: boolean;
  title: string;
  confirmLabel: string;
  danger?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
  children: ComponentChildren;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (props.open && !d.open) d.showModal();
    if (!props.open && d.open) d.close();
  }, [props.open]);
  return (
    <dialog ref={ref} aria-labelledby="confirm-title" onCancel={(e) => { e.preventDefault(); props.onCancel(); }}>
      <h2 id="confirm-title">{props.title}</h2>
      <div class="dialog-body">{props.children}</div>
      <div class="actions">
        <button type="button" onClick={props.onCancel}>Cancel</button>
        <button type="button" class={props.danger ? "danger" : "primary"} onClick={props.onConfirm}>
          {props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

// SecretOnce shows a new key's secret, the one time it is shown, with a copy button and the warning; onDone hides it.
export function SecretOnce(props: { title: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState("");
  return (
    <div class="card minted" role="status">
      <p><strong>{props.title}</strong> Copy it now: it is shown once and never again.</p>
      <code class="secret" id="minted-key">{props.secret}</code>
      <div class="actions">
        <button type="button" onClick={async () => { try { await navigator.clipboard.writeText(props.secret); setCopied("Copied."); } catch { setCopied("Copy failed: select the key and copy it."); } }}>Copy key</button>
        <span class="muted">{copied}</span>
        <button type="button" onClick={props.onDone}>Done, hide it</button>
      </div>
    </div>
  );
}

export function FieldMsg(props: { id: string; msg?: string }) {
  if (!props.msg) return null;
  return (
    <p id={props.id} class="field-error" role="alert">
      {props.msg}
    </p>
  );
}

export function utc(ts: string | null | undefined): string {
  if (!ts) return "—";
  const d = new Date(ts);
  if (isNaN(d.getTime())) return ts;
  return d.toISOString().replace("T", " ").replace(/:\d\d(\.\d+)?Z$/, " UTC");
}
