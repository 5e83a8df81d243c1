// @ts-check
// Runs under node's own test runner against a live gate (tests/hooks/test_examples.py starts
// it and passes GATE_URL, GATE_TOKEN and GATE_APPROVER_TOKEN).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import register, { gateToolCall } from "./gate-hook.mjs";

const url = process.env.GATE_URL ?? "";
const approver = process.env.GATE_APPROVER_TOKEN ?? "";

/** Decide the pending request of `session` as the approver, once it shows up. */
async function decideWhenPending(/** @type {string} */ session, /** @type {string} */ verdict, /** @type {string} */ comment, /** @type {unknown} */ edited = undefined) {
  const headers = { authorization: `Bearer ${approver}`, "content-type": "application/json" };
  for (let i = 0; i < 500; i++) {
    const res = await fetch(`${url}/v1/requests?status=pending&session_id=${session}`, { headers });
    const { items } = await res.json();
    if (items.length) {
      const r = await fetch(`${url}/v1/requests/${items[0].id}/decision`, {
        method: "POST",
        headers,
        body: JSON.stringify({ verdict, comment, edited_args: edited }),
      });
      assert.equal(r.status, 200);
      return;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("no pending request appeared");
}

test("register puts a tool_call handler on the runtime", () => {
  /** @type {Record<string, unknown>} */
  const handlers = {};
  register({ on: (event, handler) => { handlers[event] = handler; } });
  assert.equal(typeof handlers.tool_call, "function");
});

test("policy allow and deny need no person", async () => {
  const onToolCall = gateToolCall();
  assert.equal(await onToolCall({ toolName: "read_file", input: {} }), undefined);
  const denied = await onToolCall({ toolName: "db_write", input: { env: "prod" } });
  assert.equal(denied?.block, true);
  assert.match(denied?.reason ?? "", /No writes to prod from agents/);
});

test("a person approves, then rejects with a comment", async () => {
  const onToolCall = gateToolCall();
  const session = randomUUID();
  const [approved] = await Promise.all([
    onToolCall({ toolName: "pay_vendor", input: { amount: 90000 }, sessionId: session, toolCallId: randomUUID() }),
    decideWhenPending(session, "approve", "ok"),
  ]);
  assert.equal(approved, undefined);
  const [rejected] = await Promise.all([
    onToolCall({ toolName: "pay_vendor", input: { amount: 95000 }, sessionId: session, toolCallId: randomUUID() }),
    decideWhenPending(session, "reject", "too much"),
  ]);
  assert.deepEqual(rejected, {
    block: true,
    reason: "gate: Rejected by alice in the API: too much. A person said no; do not retry it unchanged.",
  });
});

test("own deadline and an unreachable gate block", async () => {
  const late = await gateToolCall({ timeoutMs: 300 })({ toolName: "ask_later", input: {}, sessionId: randomUUID() });
  assert.equal(late?.block, true);
  assert.match(late?.reason ?? "", /nobody decided this ask_later call in time/);
  const down = await gateToolCall({ url: "http://127.0.0.1:9" })({ toolName: "ask_x", input: {} });
  assert.equal(down?.block, true);
  assert.match(down?.reason ?? "", /could not be reached/);
});

test("an approval with edits rewrites the call's input in place", async () => {
  const onToolCall = gateToolCall();
  const session = randomUUID();
  const input = { amount: 90000, vendor: "acme" };
  const [approved] = await Promise.all([
    onToolCall({ toolName: "pay_vendor", input, sessionId: session, toolCallId: randomUUID() }),
    decideWhenPending(session, "approve", "cap it", { amount: 60000, vendor: "acme" }),
  ]);
  assert.equal(approved, undefined);
  assert.deepEqual(input, { amount: 60000, vendor: "acme" });
});
