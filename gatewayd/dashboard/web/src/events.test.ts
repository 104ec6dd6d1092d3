import { describe, expect, it } from "vitest";
import { toCSV } from "./events";

describe("toCSV", () => {
  it("writes each event's cost in micro-USD after its tokens, 0 when the event has none", () => {
    const e = {
      idempotencyKey: "evt_1", timestamp: "2026-11-25T12:00:00Z", requestId: "req_1", modelSlug: "demo/echo",
      externalEntityId: "=cmd", groupId: "g", apiKeyPrefix: "mgk_0000", statusCode: 200,
      tokens: { inputTokens: 2, outputTokens: 5 },
    };
    expect(toCSV([{ ...e, costMicroUsd: 53 }, e]).split("\r\n")).toEqual([
      "timestamp,request_id,model_slug,external_entity_id,group_id,api_key_prefix,status_code,input_tokens,output_tokens,cost_micro_usd",
      "2026-11-25T12:00:00Z,req_1,demo/echo,'=cmd,g,mgk_0000,200,2,5,53",
      "2026-11-25T12:00:00Z,req_1,demo/echo,'=cmd,g,mgk_0000,200,2,5,0",
      "",
    ]);
  });
});
