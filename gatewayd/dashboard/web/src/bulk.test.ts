import { describe, expect, it } from "vitest";
import type { Group } from "./api-types";
import { type LimitChange, topmost, withLimit, writeOrder } from "./bulk";

function group(id: string, parent: string | null, minute?: number): Group {
  return {
    id,
    metadata: { name: id, external_entity_id: "ext-" + id },
    models: [{ slug: "m", rate_limits: minute === undefined ? [] : [{ type: "REQUEST", unit: "MINUTE", threshold: minute }], usage_limits: [{ type: "REQUEST", unit: "DAY", threshold: 9 }] }],
    effective_models: [],
    hierarchy: { parent_group_id: parent, limit_enforcement: "CASCADING" } as Group["hierarchy"],
    created_at: "",
  };
}

const change = (threshold: number): LimitChange => ({ slug: "m", type: "REQUEST", unit: "MINUTE", threshold });
// root(100) <- mid(80) <- leaf(60), and other(no minute limit) under root.
const all = [group("root", null, 100), group("mid", "root", 80), group("leaf", "mid", 60), group("other", "root")];

describe("withLimit", () => {
  it("replaces the limit of the same type and unit and keeps the others", () => {
    const w = withLimit(all[1], change(70));
    expect(w).toEqual({ old: 80, models: [{ slug: "m", rate_limits: [{ type: "REQUEST", unit: "MINUTE", threshold: 70 }], usage_limits: [{ type: "REQUEST", unit: "DAY", threshold: 9 }] }] });
  });
  it("adds the limit when the model has none of that type and unit", () => {
    const w = withLimit(all[3], change(5));
    expect("models" in w && w.models[0].rate_limits).toEqual([{ type: "REQUEST", unit: "MINUTE", threshold: 5 }]);
  });
  it("puts a COST MONTH limit among the usage limits, beside the DAY one", () => {
    const w = withLimit(all[1], { slug: "m", type: "COST", unit: "MONTH", threshold: 5000000 });
    expect("models" in w && w.models[0].usage_limits).toEqual([{ type: "REQUEST", unit: "DAY", threshold: 9 }, { type: "COST", unit: "MONTH", threshold: 5000000 }]);
    expect("models" in w && w.models[0].rate_limits).toEqual([{ type: "REQUEST", unit: "MINUTE", threshold: 80 }]);
  });
  it("refuses a group without the slug, naming the field", () => {
    expect(withLimit(all[0], { ...change(5), slug: "nope" })).toEqual({ error: "models: this group has no model nope; nothing was sent." });
  });
});

describe("writeOrder", () => {
  it("lowers deepest first", () => expect(writeOrder(["root", "mid", "leaf"], all, change(10))).toEqual(["leaf", "mid", "root"]));
  it("raises shallowest first", () => expect(writeOrder(["leaf", "root", "mid"], all, change(500))).toEqual(["root", "mid", "leaf"]));
  it("lowers before it raises", () => expect(writeOrder(["leaf", "root"], all, change(70))).toEqual(["root", "leaf"]));
});

describe("topmost", () => {
  it("drops groups whose ancestor is selected", () => expect(topmost(["leaf", "mid", "other"], all)).toEqual(["mid", "other"]));
});
