// The workspace keys screen: the keys the session's key may see, and create (the secret shown once), rename and
// revoke, each offered only where gatewayd/authz.Decide allows it: the session's key_create for the form, each
// listed key's `can` for its row. The server still judges every call; a refusal shows next to its field.
import { useState } from "preact/hooks";
import { api, ApiError, listAll, type KeyCreate, type Who } from "./api";
import type { Endpoint, ModelList, TeamList, WorkspaceKey, WorkspaceKeyList, WorkspaceKeyType } from "./api-types";
import {
  bodyOf, fieldOf, type KeyField, type KeyForm, mayShareModelAPI, ruleOf, splitList, teamChoices, TYPE_LABELS,
} from "./keyform";
import { Confirm, FieldMsg, Loading, Page, SecretOnce, useAsync, utc } from "./ui";

const enc = encodeURIComponent;

// fieldErrors puts each of the server's field messages on its form field; the rest is the form's error.
function fieldErrors(err: unknown): { fields: Map<KeyField, string>; form: string } {
  const ae = err as ApiError;
  const fields = new Map<KeyField, string>();
  for (const f of ae.fields ?? []) {
    const at = fieldOf(f.field);
    if (at && !fields.has(at)) fields.set(at, f.message);
  }
  return { fields, form: fields.size ? "The server refused the key: see the fields marked below." : ae.message ?? String(err) };
}

// IdPicker chooses ids: checkboxes when the choices could be listed, else a comma-separated text input.
function IdPicker(props: {
  id: string; legend: string; hint: string; choices: { id: string; label: string }[] | null; value: string[];
  error?: string; onChange: (v: string[]) => void;
}) {
  if (!props.choices || props.choices.length === 0) {
    return (
      <div class="field">
        <label for={props.id}>{props.legend}</label>
        <input id={props.id} value={props.value.join(", ")} onInput={(e) => props.onChange(splitList((e.target as HTMLInputElement).value))}
          aria-invalid={props.error ? "true" : undefined} aria-describedby={`${props.id}-hint ${props.id}-err`} placeholder="comma separated" />
        <p id={`${props.id}-hint`} class="hint">{props.hint}</p>
        <FieldMsg id={`${props.id}-err`} msg={props.error} />
      </div>
    );
  }
  return (
    <fieldset class="field picks" aria-describedby={`${props.id}-hint ${props.id}-err`}>
      <legend>{props.legend}</legend>
      <p id={`${props.id}-hint`} class="hint">{props.hint}</p>
      {props.choices.map((c) => (
        <label key={c.id} class="check">
          <input type="checkbox" checked={props.value.includes(c.id)}
            onChange={(e) => props.onChange((e.target as HTMLInputElement).checked ? [...props.value, c.id] : props.value.filter((x) => x !== c.id))} />
          {c.label}
        </label>
      ))}
      <FieldMsg id={`${props.id}-err`} msg={props.error} />
    </fieldset>
  );
}

interface Choices { teams: TeamList["teams"]; models: { id: string; label: string }[] | null; endpoints: { id: string; label: string }[] | null }

// loadChoices loads what the form picks from: the teams, and the models and Endpoints when the session may list
// them (else, or on a failure, the field is free text).
async function loadChoices(can: Who["can"]): Promise<Choices> {
  const [teams, models, endpoints] = await Promise.all([
    api<TeamList>("GET", "/v1/teams").then((t) => t.teams, () => []),
    can.models ? api<ModelList>("GET", "/v1/models").then((m) => m.models.map((x) => ({ id: x.id, label: `${x.name} (${x.id})` })), () => null) : null,
    can.gateway ? listAll<Endpoint>("/v1/gateway/endpoints").then((es) => es.map((e) => ({ id: e.slug, label: e.slug })), () => null) : null,
  ]);
  return { teams, models, endpoints };
}

function KeyCreator(props: { who: Who["can"]; can: KeyCreate[]; onCreated: (secret: string, name: string) => void; onCancel: () => void }) {
  const choices = useAsync(() => loadChoices(props.who), []);
  const types = props.can.map((c) => c.type as WorkspaceKeyType);
  const [f, setF] = useState<KeyForm>({ type: types[0] ?? "", name: "", team: "", sharedModelAPI: false, models: [], environments: "" });
  const [errors, setErrors] = useState<Map<KeyField, string>>(new Map());
  const [formError, setFormError] = useState("");
  const [busy, setBusy] = useState(false);
  const type = f.sharedModelAPI ? "WORKSPACE_INVOKE" : f.type;
  const rule = ruleOf(props.can, type);
  const teams = choices.data?.teams ?? [];
  const teamIds = teamChoices(props.can, type, teams.map((t) => t.id));
  const teamName = (id: string) => (id === "" ? "The whole workspace (every team)" : teams.find((t) => t.id === id)?.name ?? id);
  // The team shown is the one chosen while the type allows it, else the first the type allows.
  const team = teamIds.includes(f.team) ? f.team : teamIds[0] ?? "";
  const set = (p: Partial<KeyForm>) => setF((x) => ({ ...x, ...p, ...("type" in p || "sharedModelAPI" in p ? { models: [] } : {}) }));
  if (!choices.data) return <Loading error={choices.error} />;

  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setFormError("");
    setErrors(new Map());
    try {
      const body = bodyOf({ ...f, team }, props.can);
      const created = await api<{ api_key: string }>("POST", "/v1/api_keys", body);
      props.onCreated(created.api_key, body.name);
    } catch (err) {
      const fe = fieldErrors(err);
      setErrors(fe.fields);
      setFormError(fe.form);
    } finally {
      setBusy(false);
    }
  }
  const err = (k: KeyField) => errors.get(k);
  return (
    <form class="card editor" onSubmit={submit} noValidate aria-labelledby="create-title">
      <h2 id="create-title">New workspace key</h2>
      {formError && <p class="form-error" role="alert">{formError}</p>}
      {mayShareModelAPI(props.can) && (
        <div class="field">
          <label class="check">
            <input type="checkbox" id="shared-api" checked={f.sharedModelAPI} onChange={(e) => set({ sharedModelAPI: (e.target as HTMLInputElement).checked })} aria-describedby="shared-api-hint" />
            A team key that calls the shared model API
          </label>
          <p id="shared-api-hint" class="hint">
            An inference-only (WORKSPACE_INVOKE) key for the OpenAI-compatible routes (/v1/chat/completions, /v1/completions,
            /v1/embeddings), held to the workspace's model-API limits. It is not scoped to environments: such a key cannot call the model API.
          </p>
        </div>
      )}
      {!f.sharedModelAPI && (
        <div class="field">
          <label for="key-type">Type</label>
          <select id="key-type" value={f.type} onChange={(e) => set({ type: (e.target as HTMLSelectElement).value as WorkspaceKeyType })}
            aria-invalid={err("type") ? "true" : undefined} aria-describedby="key-type-err">
            {types.map((t) => <option key={t} value={t}>{TYPE_LABELS[t] ?? t}</option>)}
          </select>
          <FieldMsg id="key-type-err" msg={err("type")} />
        </div>
      )}
      <div class="field">
        <label for="key-new-name">Name</label>
        <input id="key-new-name" value={f.name} autocomplete="off" onInput={(e) => set({ name: (e.target as HTMLInputElement).value })}
          aria-invalid={err("name") ? "true" : undefined} aria-describedby="key-new-name-hint key-new-name-err" required />
        <p id="key-new-name-hint" class="hint">Lowercase letters, digits and hyphens; unique in its scope (team, user or workspace).</p>
        <FieldMsg id="key-new-name-err" msg={err("name")} />
      </div>
      {rule?.team && (
        <div class="field">
          <label for="key-team">Team</label>
          <select id="key-team" value={team} onChange={(e) => set({ team: (e.target as HTMLSelectElement).value })}
            aria-invalid={err("team") ? "true" : undefined} aria-describedby="key-team-err">
            {teamIds.map((id) => <option key={id} value={id}>{teamName(id)}</option>)}
          </select>
          <FieldMsg id="key-team-err" msg={err("team")} />
        </div>
      )}
      {rule?.models && (
        <IdPicker
          id="key-models"
          legend={f.sharedModelAPI ? "Model API slugs it may call" : "Models"}
          hint={f.sharedModelAPI
            ? "Endpoint slugs; none chosen: every slug of the shared model API."
            : !rule.models_alone
              ? "Model ids, only together with environments; none chosen: every model of its team."
              : "Model ids; none chosen: every model of its team."}
          choices={f.sharedModelAPI ? choices.data.endpoints : choices.data.models}
          value={f.models}
          error={err("models")}
          onChange={(models) => set({ models })}
        />
      )}
      {rule?.environments && !f.sharedModelAPI && (
        <div class="field">
          <label for="key-envs">Environments</label>
          <input id="key-envs" value={f.environments} onInput={(e) => set({ environments: (e.target as HTMLInputElement).value })}
            aria-invalid={err("environments") ? "true" : undefined} aria-describedby="key-envs-hint key-envs-err" placeholder="comma separated" />
          <p id="key-envs-hint" class="hint">e.g. production, development; empty: every environment. Such a key can call only those.</p>
          <FieldMsg id="key-envs-err" msg={err("environments")} />
        </div>
      )}
      <div class="actions">
        <span class="spacer" />
        <button type="button" onClick={props.onCancel}>Cancel</button>
        <button type="submit" class="primary" disabled={busy}>Create key</button>
      </div>
    </form>
  );
}

// RenameRow renames a key in place; a refusal shows next to the name in the server's words.
function RenameRow(props: { k: WorkspaceKey; onDone: (msg: string) => void; onCancel: () => void }) {
  const [name, setName] = useState(props.k.name);
  const [error, setError] = useState("");
  const id = `rename-${props.k.prefix}`;
  async function submit(e: Event) {
    e.preventDefault();
    setError("");
    try {
      const k = await api<WorkspaceKey>("PATCH", `/v1/api_keys/${enc(props.k.prefix)}`, { name });
      props.onDone(`Key ${k.prefix} renamed to ${k.name}.`);
    } catch (err) {
      const ae = err as ApiError;
      setError(ae.forField?.("name") ?? ae.message);
    }
  }
  return (
    <form class="inline" onSubmit={submit} noValidate aria-label={`Rename key ${props.k.prefix}`}>
      <label for={id} class="sr-only">New name of key {props.k.prefix}</label>
      <input id={id} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} aria-invalid={error ? "true" : undefined} aria-describedby={`${id}-err`} />
      <button type="submit" class="primary">Save</button>
      <button type="button" onClick={props.onCancel}>Cancel</button>
      <FieldMsg id={`${id}-err`} msg={error} />
    </form>
  );
}

export function KeysPage(props: { who: Who["can"] }) {
  const can = props.who.key_create ?? [];
  const data = useAsync(() => api<WorkspaceKeyList>("GET", "/v1/api_keys"), []);
  const [creating, setCreating] = useState(false);
  const [minted, setMinted] = useState<{ secret: string; name: string } | null>(null);
  const [renaming, setRenaming] = useState<string | null>(null);
  const [revoke, setRevoke] = useState<WorkspaceKey | null>(null);
  const [notice, setNotice] = useState("");
  const keys = data.data?.keys ?? [];

  async function doRevoke(k: WorkspaceKey) {
    setRevoke(null);
    try {
      await api("DELETE", `/v1/api_keys/${enc(k.prefix)}`);
      setNotice(`Key ${k.prefix} (${k.name}) revoked.`);
      data.reload();
    } catch (err) {
      setNotice((err as Error).message);
    }
  }

  return (
    <Page
      title="Workspace keys"
      actions={can.length > 0 && <button type="button" class="primary" onClick={() => { setCreating(true); setNotice(""); }} disabled={creating}>New key</button>}
    >
      {notice && <p role="status" class="notice">{notice}</p>}
      {minted && (
        <SecretOnce key={minted.secret} title={`New key ${minted.name} (${minted.secret.slice(0, 16)}).`} secret={minted.secret} onDone={() => setMinted(null)} />
      )}
      {creating && (
        <KeyCreator
          who={props.who}
          can={can}
          onCreated={(secret, name) => { setCreating(false); setMinted({ secret, name }); data.reload(); }}
          onCancel={() => setCreating(false)}
        />
      )}
      {!data.data ? <Loading error={data.error} /> : keys.length === 0 ? <p>No workspace keys.</p> : (
        <table>
          <caption class="sr-only">Workspace API keys</caption>
          <thead><tr><th scope="col">Prefix</th><th scope="col">Name</th><th scope="col">Type</th><th scope="col">Team</th><th scope="col">Scope</th><th scope="col">Owner</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {keys.map((k) => (
              <tr key={k.prefix}>
                <td class="mono">{k.prefix}</td>
                <td>{renaming === k.prefix
                  ? <RenameRow k={k} onDone={(m) => { setRenaming(null); setNotice(m); data.reload(); }} onCancel={() => setRenaming(null)} />
                  : k.name}</td>
                <td>{k.type}</td><td>{k.team_name ?? "all teams"}</td>
                <td class="mono">{[...k.model_ids, ...k.environments.map((e) => `env:${e}`)].join(", ") || "—"}</td>
                <td>{k.owner ? `${k.owner.name} <${k.owner.email}>` : "—"}</td>
                <td>{utc(k.created_at)}</td><td>{utc(k.last_used_at)}</td>
                <td><div class="actions">
                  {k.can.rename && renaming !== k.prefix && (
                    <button type="button" onClick={() => setRenaming(k.prefix)} aria-label={`Rename key ${k.prefix}`}>Rename</button>
                  )}
                  {k.can.revoke && (
                    <button type="button" class="danger" onClick={() => setRevoke(k)} aria-label={`Revoke key ${k.prefix}`}>Revoke</button>
                  )}
                </div></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Confirm open={!!revoke} title={`Revoke key ${revoke?.prefix ?? ""}?`} confirmLabel="Revoke key" danger onCancel={() => setRevoke(null)} onConfirm={() => revoke && doRevoke(revoke)}>
        <p>{revoke?.name} ({revoke?.type}{revoke?.team_name ? `, team ${revoke.team_name}` : ""}) stops authenticating at once. This cannot be undone.</p>
      </Confirm>
    </Page>
  );
}
