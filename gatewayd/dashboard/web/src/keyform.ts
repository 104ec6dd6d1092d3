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

// isTeamType: PERSONAL and WORKSPACE_MANAGE_API_KEYS keys act across the workspace and take no team.
export const isTeamType = (t: string) => t === "WORKSPACE_MANAGE_ALL" || t === "WORKSPACE_INVOKE" || t === "WORKSPACE_EXPORT_METRICS";
// takesEnvironments: environments scope WORKSPACE_MANAGE_ALL and WORKSPACE_INVOKE keys only.
export const takesEnvironments = (t: string) => t === "WORKSPACE_MANAGE_ALL" || t === "WORKSPACE_INVOKE";
// takesModels: model_ids scope WORKSPACE_INVOKE and WORKSPACE_EXPORT_METRICS keys, and WORKSPACE_MANAGE_ALL keys
// together with environments.
export const takesModels = (t: string) => isTeamType(t);

// teamChoices is where a key of type t may be created: "" (the whole workspace) and team ids, from the session's
// key_create: any team of teams (those the caller may list) when it may create for any, else the teams it names.
export function teamChoices(can: KeyCreate[], t: string, teams: string[]): string[] {
  const kc = can.find((c) => c.type === t);
  if (!kc) return [];
  const out = kc.workspace ? [""] : [];
  if (!isTeamType(t)) return out;
  return [...out, ...(kc.any_team ? teams : kc.teams)];
}

// mayShareModelAPI: the shared-model-API option is a WORKSPACE_INVOKE key, offered when such a key may be created.
export const mayShareModelAPI = (can: KeyCreate[]) => can.some((c) => c.type === "WORKSPACE_INVOKE");

export function splitList(s: string): string[] {
  return [...new Set(s.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean))];
}

// bodyOf is what the form sends. A shared-model-API key is a WORKSPACE_INVOKE key without environments (a key
// scoped to environments cannot call the model API: docs/decisions.md), its models being Endpoint slugs.
export function bodyOf(f: KeyForm): CreateWorkspaceKey {
  const type = (f.sharedModelAPI ? "WORKSPACE_INVOKE" : f.type) as WorkspaceKeyType;
  const body: CreateWorkspaceKey = { type, name: f.name.trim() };
  if (isTeamType(type) && f.team) body.team_id = f.team;
  if (takesModels(type) && f.models.length) body.model_ids = f.models;
  const envs = splitList(f.environments);
  if (!f.sharedModelAPI && takesEnvironments(type) && envs.length) body.environments = envs;
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
