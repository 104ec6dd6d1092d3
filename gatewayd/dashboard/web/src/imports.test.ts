// The modules of src import one another without a cycle: the router imports no screen, the screens import the
// router, and only the shell (app.tsx) imports the screens.
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

// importsOf is the relative modules a source imports or re-exports, as written ("./router").
export function importsOf(source: string): string[] {
  const out: string[] = [];
  for (const m of source.matchAll(/^\s*(?:import|export)\b[^;'"]*?(?:\bfrom\s*)?["'](\.{1,2}\/[^"']+)["']/gm)) out.push(m[1]);
  return out;
}

// cycleOf is one cycle of graph (the modules each module imports), as the modules around it, first repeated at the
// end; empty when there is none.
export function cycleOf(graph: Map<string, string[]>): string[] {
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (n: string): string[] => {
    if (state.get(n) === "done") return [];
    if (state.get(n) === "open") return [...stack.slice(stack.indexOf(n)), n];
    state.set(n, "open");
    stack.push(n);
    for (const d of graph.get(n) ?? []) {
      const c = visit(d);
      if (c.length) return c;
    }
    stack.pop();
    state.set(n, "done");
    return [];
  };
  for (const n of graph.keys()) {
    const c = visit(n);
    if (c.length) return c;
  }
  return [];
}

// srcGraph is the import graph of the modules of src (tests left out), by file name.
function srcGraph(): Map<string, string[]> {
  const dir = new URL(".", import.meta.url);
  const files = readdirSync(dir).filter((f) => /\.tsx?$/.test(f) && !/\.test\.tsx?$/.test(f));
  const resolve = (spec: string) => {
    const base = spec.replace(/^\.\//, "");
    return [base, `${base}.ts`, `${base}.tsx`].find((f) => files.includes(f));
  };
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const deps = importsOf(readFileSync(new URL(f, dir), "utf8")).map(resolve).filter((d): d is string => !!d);
    graph.set(f, deps);
  }
  return graph;
}

describe("imports", () => {
  it("reads import and re-export lines", () => {
    const src = [
      `import { a } from "./a";`,
      `import type { B } from "./b";`,
      `import {\n  c,\n  d,\n} from "./cd";`,
      `import "./style.css";`,
      `export type { E } from "./e";`,
      `import { useState } from "preact/hooks";`,
      `const s = "import x from './not-an-import'";`,
    ].join("\n");
    expect(importsOf(src)).toEqual(["./a", "./b", "./cd", "./style.css", "./e"]);
  });

  it("finds a cycle", () => {
    const g = new Map([["app", ["tree", "router"]], ["tree", ["router", "ui"]], ["router", ["app"]], ["ui", []]]);
    expect(cycleOf(g)).toEqual(["app", "tree", "router", "app"]);
    g.set("router", []);
    expect(cycleOf(g)).toEqual([]);
  });

  it("of src form no cycle", () => {
    const g = srcGraph();
    expect(cycleOf(g)).toEqual([]);
    expect(g.get("app.tsx")).toContain("router.tsx");
    expect(g.get("tree.tsx")).toContain("router.tsx");
  });

  it("of the router name no screen", () => {
    expect(srcGraph().get("router.tsx")).toEqual([]);
  });
});
