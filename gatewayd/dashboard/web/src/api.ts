// The dashboard's one door to gatewayd: same-origin fetches of the public /v1 API, authenticated by the session
// cookie (HttpOnly: script never sees it), and the login routes of /dashboard/api. A refusal becomes an ApiError
// that keeps the server's own words and its per-field messages, so a form can show each next to its field.
import type { Group, GroupPage, Key, KeyPage } from "./api-types";

export interface FieldError { field: string; message: string }

export class ApiError extends Error {
  constructor(
    public status: number,
    message: string,
    public code: string,
    public fields: FieldError[],
  ) {
    super(message);
  }
  // forField is the server's message about field (or a field under it), if any.
  forField(field: string): string | undefined {
    return this.fields.find((f) => f.field === field || f.field.endsWith("." + field))?.message;
  }
}

// serverWords is a field's refusal as the server put it. A cascading refusal comes from the webhook through the API
// server, which puts its reason ("Forbidden: ") first; that prefix goes, so the field reads as the webhook's
// sentence, `Child group exceeds parent group limit.`, with its particulars.
export function serverWords(ae: ApiError, fieldMsg: string): string {
  if (ae.code !== "child_exceeds_parent_limit") return fieldMsg;
  const m = fieldMsg.replace(/^Forbidden: /, "");
  return m.startsWith(ae.message) ? m : `${ae.message} ${m}`;
}

// refusal is a whole refusal in the server's words: the field it names with its message, else its error.
export function refusal(err: unknown): string {
  const ae = err as ApiError;
  const f = ae.fields?.[0];
  return f ? `${f.field}: ${serverWords(ae, f.message)}` : ae.message ?? String(err);
}

let onUnauthorized: () => void = () => {};
export function setUnauthorizedHandler(f: () => void) {
  onUnauthorized = f;
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)["Content-Type"] = "application/json";
  }
  const res = await fetch(path, init);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const detail = data?.detail;
    const fields: FieldError[] = Array.isArray(detail)
      ? detail.filter((d: any) => d && typeof d.field === "string").map((d: any) => ({ field: d.field, message: String(d.message ?? "") }))
      : [];
    const err = new ApiError(res.status, data?.error ?? `${res.status} ${res.statusText}`, data?.error_code ?? "", fields);
    if (res.status === 401 && !path.startsWith("/dashboard/api/login")) onUnauthorized();
    throw err;
  }
  return data as T;
}

// listAll follows the cursor of a paged list to its end.
export async function listAll<T>(path: string): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  for (let i = 0; i < 1000; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const page: { items: T[]; pagination?: { has_more: boolean; cursor: string | null } } = await api(
      "GET",
      cursor ? `${path}${sep}cursor=${encodeURIComponent(cursor)}` : path,
    );
    out.push(...page.items);
    if (!page.pagination?.has_more || !page.pagination.cursor) break;
    cursor = page.pagination.cursor;
  }
  return out;
}

export const listGroups = () => listAll<Group>("/v1/gateway/groups");
export const listKeys = (id: string) => listAll<Key>(`/v1/gateway/groups/${encodeURIComponent(id)}/api_keys`);
export type { GroupPage, KeyPage };

export interface Who {
  namespace: string;
  key_prefix: string;
  key_type: string;
  key_name: string;
  expires_at: string;
  can: { gateway: boolean; keys: boolean; models: boolean; key_create: KeyCreate[] };
}

// KeyCreate is where the session's key may create workspace keys of type (gatewayd/authz.Decide, reported by the
// session): workspace-wide, for any team, or for the teams named; and the scope fields such a key takes, from its
// type's rule (api/v1alpha1.KeyTypeRules): a team, model_ids (alone, or only with environments), environments.
export interface KeyCreate {
  type: string; workspace: boolean; any_team: boolean; teams: string[];
  team: boolean; models: boolean; models_alone: boolean; environments: boolean;
}

export type { ThrottleCount, Throttles } from "./api-types";
