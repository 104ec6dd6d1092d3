// The workspace-key form's rules: which types, teams and scope fields to offer, as the session's key_create
// (gatewayd/authz.Decide) and docs/rest-api.md "Workspace keys and teams" allow, the body sent to POST /v1/api_keys,
// and which form field each of the server's field paths belongs to.
import type { KeyCreate } from "./api";
import type { CreateWorkspaceKey, WorkspaceKeyType } from "./api-types";

export type KeyField = "type" | "name" | "team" | "models" | "environments";

export interface KeyForm {
  type: WorkspaceKeyType | "";
  name: string;
  // team is a team id, or "" for the whole workspace.
  team: string;
  // sharedModelAPI: a WORKSPACE_INVOKE key that calls the shared model API (the OpenAI-compatible routes).
  sharedModelAPI: boolean;
  models: string[];
  environments: string;
}

export const TYPE_LABELS: Record<WorkspaceKeyType, string> = {
  PERSONAL: "Personal (PERSONAL): acts as you",
  WORKSPACE_MANAGE_ALL: "Team, full access (WORKSPACE_MANAGE_ALL)",
  WORKSPACE_INVOKE: "Team, inference only (WORKSPACE_INVOKE)",
  WORKSPACE_EXPORT_METRICS: "Team, metrics only (WORKSPACE_EXPORT_METRICS)",
  WORKSPACE_MANAGE_API_KEYS: "Key management (WORKSPACE_MANAGE_API_KEYS)",
};

// ruleOf is what the session says of type t: where a key of that type may be created and which scope fields it
// takes (the rules live in api/v1alpha1.KeyTypeRules; the form holds no copy). undefined: the key may create none.
export const ruleOf = (can: KeyCreate[], t: string) => can.find((c) => c.type === t);

// teamChoices is where a key of type t may be created: "" (the whole workspace) and team ids, from the session's
// key_create: any team of teams (those the caller may list) when it may create for any, else the teams it names.
export function teamChoices(can: KeyCreate[], t: string, teams: string[]): string[] {
  const kc = ruleOf(can, t);
  if (!kc) return [];
  const out = kc.workspace ? [""] : [];
  if (!kc.team) return out;
  return [...out, ...(kc.any_team ? teams : kc.teams)];
}

// mayShareModelAPI: the shared-model-API option is a WORKSPACE_INVOKE key, offered when such a key may be created.
export const mayShareModelAPI = (can: KeyCreate[]) => can.some((c) => c.type === "WORKSPACE_INVOKE");

export function splitList(s: string): string[] {
  return [...new Set(s.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean))];
}

// bodyOf is what the form sends. A shared-model-API key is a WORKSPACE_INVOKE key without environments (a key
// scoped to environments cannot call the model API: docs/decisions.md), its models being Endpoint slugs.
export function bodyOf(f: KeyForm, can: KeyCreate[]): CreateWorkspaceKey {
  const type = (f.sharedModelAPI ? "WORKSPACE_INVOKE" : f.type) as WorkspaceKeyType;
  const rule = ruleOf(can, type);
  const body: CreateWorkspaceKey = { type, name: f.name.trim() };
  if (rule?.team && f.team) body.team_id = f.team;
  if (rule?.models && f.models.length) body.model_ids = f.models;
  const envs = splitList(f.environments);
  if (!f.sharedModelAPI && rule?.environments && envs.length) body.environments = envs;
  return body;
}

// fieldOf maps a field path of the server's refusal (`name`, `team_id`, `model_ids[2]`, ...) to the form field.
export function fieldOf(path: string): KeyField | undefined {
  const head = path.replace(/\[.*$/, "").replace(/\..*$/, "");
  switch (head) {
    case "type": return "type";
    case "name": return "name";
    case "team_id": return "team";
    case "model_ids": return "models";
    case "environments": return "environments";
  }
  return undefined;
}
