import { describe, expect, it, vi } from "vitest";
import { groupPath, navFor, newGroupPath, parseRoute, replaceQuery } from "./router";

const all = { gateway: true, keys: true, models: true };
const keysOnly = { gateway: false, keys: true, models: false };
const none = { gateway: false, keys: false, models: false };

describe("parseRoute", () => {
  it.each([
    ["/dashboard/", all, { screen: "tree" }, "/dashboard/"],
    ["/dashboard/endpoints", all, { screen: "endpoints" }, "/dashboard/endpoints"],
    ["/dashboard/keys", all, { screen: "keys" }, "/dashboard/keys"],
    ["/dashboard/events?status=429", all, { screen: "events" }, "/dashboard/events"],
    ["/dashboard/usage?slug=m&window=24h", all, { screen: "usage" }, "/dashboard/usage"],
    ["/dashboard/models", all, { screen: "models" }, "/dashboard/models"],
    ["/dashboard/groups/new?parent=g-1", all, { screen: "group-new", parent: "g-1" }, "/dashboard/"],
    ["/dashboard/groups/new", all, { screen: "group-new", parent: null }, "/dashboard/"],
    ["/dashboard/groups/a%2Fb", all, { screen: "group", id: "a/b", key: "a%2Fb" }, "/dashboard/"],
    ["/dashboard/nothing", all, { screen: "none" }, "/dashboard/nothing"],
    // A screen the key may not use shows its first allowed one; with none allowed, none.
    ["/dashboard/", keysOnly, { screen: "keys" }, "/dashboard/keys"],
    ["/dashboard/groups/g-1", keysOnly, { screen: "keys" }, "/dashboard/keys"],
    ["/dashboard/models", keysOnly, { screen: "keys" }, "/dashboard/keys"],
    ["/dashboard/models", none, { screen: "none" }, ""],
  ] as const)("%s", (loc, can, route, section) => {
    const got = parseRoute(loc, can);
    expect(got.route).toEqual(route);
    expect(got.section).toBe(section);
  });

  it("keeps the query", () => {
    expect(parseRoute("/dashboard/?q=acme&filter=near", all).query.get("filter")).toBe("near");
  });
});

describe("navFor", () => {
  it("lists the screens the key may use", () => {
    expect(navFor(keysOnly).map(([href]) => href)).toEqual(["/dashboard/keys"]);
    expect(navFor(all)).toHaveLength(6);
  });
});

describe("paths", () => {
  it("of a group and a new group", () => {
    expect(groupPath("a/b")).toBe("/dashboard/groups/a%2Fb");
    expect(newGroupPath()).toBe("/dashboard/groups/new");
    expect(newGroupPath("g 1")).toBe("/dashboard/groups/new?parent=g%201");
  });

  it("replaceQuery sets the names given a value and removes the empty ones", () => {
    const to: string[] = [];
    vi.stubGlobal("history", { replaceState: (_s: unknown, _t: string, url: string) => to.push(url) });
    vi.stubGlobal("window", { dispatchEvent: () => true });
    try {
      replaceQuery({ q: "acme", filter: "" }, "/dashboard/", new URLSearchParams("filter=near&x=1"));
      replaceQuery({ window: "" }, "/dashboard/usage", "window=24h");
      replaceQuery({ external_entity_ids: "", api_keys: "mgk_1", status: "429" }, "/dashboard/events", "");
    } finally {
      vi.unstubAllGlobals();
    }
    expect(to).toEqual(["/dashboard/?x=1&q=acme", "/dashboard/usage", "/dashboard/events?api_keys=mgk_1&status=429"]);
  });
});
