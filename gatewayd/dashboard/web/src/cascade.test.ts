import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type CGroup, type Conflict, cascadingConflicts } from "./cascade";

// The same cases as the Go webhook rule: api/v1alpha1/hierarchy/testdata/cascading.json.
const file = JSON.parse(
  readFileSync(new URL("../../../../api/v1alpha1/hierarchy/testdata/cascading.json", import.meta.url), "utf8"),
) as { cases: { name: string; groups: CGroup[]; write: CGroup; want: Conflict[] }[] };

describe("cascadingConflicts", () => {
  it("has cases", () => expect(file.cases.length).toBeGreaterThan(0));
  it.each(file.cases)("$name", (c) => {
    const others = c.groups.filter((g) => g.id !== c.write.id);
    const stale = c.groups.filter((g) => g.id === c.write.id);
    // The group being written replaces its stored self; its children still point at it.
    expect(cascadingConflicts(c.write, [...others, ...stale])).toEqual(c.want);
  });
});
