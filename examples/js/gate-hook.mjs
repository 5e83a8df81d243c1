// @ts-check
/**
 * gate for agent runtimes that register in-process handlers with `on("tool_call", ...)`
 * returning `{ block, reason }` (node 18+: uses the global fetch).
 *
 *   import register from "./gate-hook.mjs";
 *   export default (api) => register(api, { url: "http://127.0.0.1:8000", token: "..." });
 *
 * Every call is asked about (`POST /v1/gate`); for `ask`, the handler long-polls until a person
 * decides, reconnecting if the server restarts. Anything that is not a yes blocks: rejected,
 * expired, cancelled, policy deny, gate unreachable, own deadline (fail closed). No rule
 * matched lets the call through, as if gate were not there.
 *
 * An approver may approve with edited arguments (`request.approved_args`, the full object):
 * the handler then replaces the contents of the event's `input` (or `args`) object in place,
 * so a runtime that runs the tool with that object runs the edited call.
 */

/**
 * @typedef {object} ToolCallEvent
 * @property {string} [toolName]
 * @property {string} [tool_name]
 * @property {Record<string, unknown>} [input]
 * @property {Record<string, unknown>} [args]
 * @property {string} [toolCallId]
 * @property {string} [sessionId]
 *
 * @typedef {{ block: true, reason: string } | undefined} ToolCallResult
 *
 * @typedef {object} GateOptions
 * @property {string} [url]        gate server (default: $GATE_URL or http://127.0.0.1:8000)
 * @property {string} [token]      agent token (default: $GATE_TOKEN)
 * @property {string} [agentId]
 * @property {number} [timeoutMs]  how long to wait for a person (default 540000)
 * @property {number} [waitSliceS] one long-poll, seconds (default 25)
 *
 * @typedef {{ on: (event: "tool_call", handler: (e: ToolCallEvent) => Promise<ToolCallResult>) => void }} HookApi
 */

const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A `tool_call` handler that asks gate.
 * @param {GateOptions} [options]
 * @returns {(event: ToolCallEvent) => Promise<ToolCallResult>}
 */
export function gateToolCall(options = {}) {
  const url = (options.url ?? process.env.GATE_URL ?? "http://127.0.0.1:8000").replace(/\/$/, "");
  const token = options.token ?? process.env.GATE_TOKEN;
  const timeoutMs = options.timeoutMs ?? 540_000;
  const slice = options.waitSliceS ?? 25;
  /** @type {Record<string, string>} */
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;

  /**
   * @param {string} method
   * @param {string} path
   * @param {unknown} [body]
   * @returns {Promise<{ status: number, body: any }>}  status 0: no answer
   */
  async function call(method, path, body) {
    try {
      const res = await fetch(url + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : null };
    } catch (err) {
      return { status: 0, body: { error: { code: "unreachable", message: String(err) } } };
    }
  }

  /** @param {{ status: number, body: any }} reply */
  const problem = (reply) =>
    reply.body?.error ? `${reply.status} ${reply.body.error.code}: ${reply.body.error.message}` : `HTTP ${reply.status}`;

  return async function onToolCall(event) {
    const tool = event.toolName ?? event.tool_name ?? "tool";
    const deadline = Date.now() + timeoutMs;
    const submitted = await call("POST", "/v1/gate", {
      tool_name: tool,
      tool_args: event.input ?? event.args ?? {},
      agent_id: options.agentId,
      session_id: event.sessionId,
      idempotency_key: event.toolCallId,
      context: { source: "on-tool-call" },
    });
    if (submitted.status === 0) {
      return { block: true, reason: `gate: the approval server at ${url} could not be reached, so this ${tool} call was blocked to be safe. Nobody reviewed it.` };
    }
    if (submitted.status !== 200) {
      return { block: true, reason: `gate: the approval server refused the call (${problem(submitted)}), so it was blocked. Nobody reviewed it.` };
    }
    const answer = submitted.body;
    if (answer.decision === "allow") return undefined;
    if (answer.decision === "deny") {
      return { block: true, reason: `gate: blocked by rule '${answer.rule}': ${answer.reason}. Do not retry this call.` };
    }
    let request = answer.request;
    let failures = 0;
    while (request.status === "pending") {
      const left = deadline - Date.now();
      if (left <= 0) {
        await call("POST", `/v1/requests/${request.id}/cancel`, { reason: "the agent stopped waiting" });
        return { block: true, reason: `gate: nobody decided this ${tool} call in time, so it was not run. No human rejected it.` };
      }
      const seconds = Math.min(slice, left / 1000).toFixed(3);
      const reply = await call("GET", `/v1/requests/${request.id}/wait?timeout=${seconds}`);
      if (reply.status === 200) {
        request = reply.body;
        failures = 0;
      } else if (reply.status === 0 || reply.status >= 500) {
        failures += 1; // the server restarts: the request is in its database, keep asking
        await sleep(Math.min(200 * 2 ** (failures - 1), 2000, Math.max(0, deadline - Date.now())));
      } else {
        return { block: true, reason: `gate: the approval server answered ${problem(reply)}, so this ${tool} call was blocked.` };
      }
    }
    if (request.status === "approved") {
      applyEdits(event, request.approved_args);
      return undefined;
    }
    if (request.status === "rejected") {
      return { block: true, reason: `gate: ${request.reason}. A person said no; do not retry it unchanged.` };
    }
    return { block: true, reason: `gate: ${request.reason} The call was not run; no human rejected it.` };
  };
}

/**
 * Replace the call's arguments with the approver's edited ones, in place.
 * @param {ToolCallEvent} event
 * @param {unknown} edited  the full edited object, or null when approved as asked
 */
function applyEdits(event, edited) {
  if (!edited || typeof edited !== "object") return;
  const target = event.input ?? event.args;
  if (!target) {
    event.input = { .../** @type {Record<string, unknown>} */ (edited) };
    return;
  }
  for (const key of Object.keys(target)) delete target[key];
  Object.assign(target, edited);
}

/**
 * Register the gate handler on an agent runtime's hook API.
 * @param {HookApi} api
 * @param {GateOptions} [options]
 */
export default function register(api, options) {
  api.on("tool_call", gateToolCall(options));
}
