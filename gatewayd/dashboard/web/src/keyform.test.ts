import { describe, expect, it } from "vitest";
import type { KeyCreate } from "./api";
import { bodyOf, fieldOf, type KeyForm, mayShareModelAPI, splitList, teamChoices } from "./keyform";

const form = (p: Partial<KeyForm>): KeyForm => ({ type: "WORKSPACE_INVOKE", name: "ci", team: "", sharedModelAPI: false, models: [], environments: "", ...p });

// The scope fields of each type as the session reports them (gatewayd/dashboard: api/v1alpha1.KeyTypeRules).
const scope = {
  PERSONAL: { team: false, models: false, models_alone: false, environments: false },
  WORKSPACE_MANAGE_ALL: { team: true, models: true, models_alone: false, environments: true },
  WORKSPACE_INVOKE: { team: true, models: true, models_alone: true, environments: true },
  WORKSPACE_EXPORT_METRICS: { team: true, models: true, models_alone: true, environments: false },
  WORKSPACE_MANAGE_API_KEYS: { team: false, models: false, models_alone: false, environments: false },
};
const kc = (type: keyof typeof scope, where: { workspace: boolean; any_team: boolean; teams: string[] }): KeyCreate => ({ type, ...where, ...scope[type] });
const anywhere = { workspace: true, any_team: true, teams: [] };
const everyType = (Object.keys(scope) as (keyof typeof scope)[]).map((t) => kc(t, anywhere));

describe("teamChoices", () => {
  const admin: KeyCreate[] = [
    kc("PERSONAL", { workspace: true, any_team: false, teams: [] }),
    kc("WORKSPACE_INVOKE", anywhere),
  ];
  const teamAdmin: KeyCreate[] = [kc("WORKSPACE_INVOKE", { workspace: false, any_team: false, teams: ["red"] })];
  it("offers the workspace and every listed team when any team is allowed", () => {
    expect(teamChoices(admin, "WORKSPACE_INVOKE", ["blue", "red"])).toEqual(["", "blue", "red"]);
  });
  it("offers a team admin only the teams Decide named, never the workspace", () => {
    expect(teamChoices(teamAdmin, "WORKSPACE_INVOKE", ["blue", "red"])).toEqual(["red"]);
  });
  it("offers no team for PERSONAL and nothing for a type the key may not create", () => {
    expect(teamChoices(admin, "PERSONAL", ["blue"])).toEqual([""]);
    expect(teamChoices(teamAdmin, "WORKSPACE_MANAGE_ALL", ["red"])).toEqual([]);
  });
  it("offers the shared model API option only with WORKSPACE_INVOKE", () => {
    expect(mayShareModelAPI(admin)).toBe(true);
    expect(mayShareModelAPI([kc("PERSONAL", { workspace: true, any_team: false, teams: [] })])).toBe(false);
  });
});

describe("bodyOf", () => {
  it("sends only the fields the type takes", () => {
    expect(bodyOf(form({ type: "PERSONAL", name: " me ", team: "red", models: ["m1"], environments: "production" }), everyType)).toEqual({ type: "PERSONAL", name: "me" });
    expect(bodyOf(form({ type: "WORKSPACE_EXPORT_METRICS", team: "red", models: ["m1"], environments: "production" }), everyType)).toEqual({
      type: "WORKSPACE_EXPORT_METRICS", name: "ci", team_id: "red", model_ids: ["m1"],
    });
    expect(bodyOf(form({ type: "WORKSPACE_MANAGE_ALL", team: "red", environments: "production, development,production" }), everyType)).toEqual({
      type: "WORKSPACE_MANAGE_ALL", name: "ci", team_id: "red", environments: ["production", "development"],
    });
  });
  it("makes a shared-model-API key an inference key without environments", () => {
    expect(bodyOf(form({ type: "WORKSPACE_MANAGE_ALL", sharedModelAPI: true, team: "red", models: ["chat"], environments: "production" }), everyType)).toEqual({
      type: "WORKSPACE_INVOKE", name: "ci", team_id: "red", model_ids: ["chat"],
    });
  });
});

describe("fieldOf", () => {
  it("maps the server's field paths to the form's fields", () => {
    expect(fieldOf("name")).toBe("name");
    expect(fieldOf("team_id")).toBe("team");
    expect(fieldOf("model_ids[1]")).toBe("models");
    expect(fieldOf("environments[0]")).toBe("environments");
    expect(fieldOf("type")).toBe("type");
    expect(fieldOf("prefix")).toBeUndefined();
  });
  it("splits lists on commas and spaces, once each", () => {
    expect(splitList(" a, b  c,,a ")).toEqual(["a", "b", "c"]);
  });
});
