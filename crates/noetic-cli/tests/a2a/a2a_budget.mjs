// A context paused over its budget, seen by the official A2A client (@a2a-js/sdk over JSON-RPC): the task whose
// turn reaches the budget, then a message to the context, which the server queues and answers with the task it
// will run as, TASK_STATE_SUBMITTED, whose status message says the session is paused over its budget and how it
// continues; raising the limit (PUT /api/sessions/{context}/budget) runs it to TASK_STATE_COMPLETED. Run by
// tests/serve_budget_protocols.rs:
//
//   node a2a_budget.mjs BASE_URL
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_A2A_SDK_DIR, "node_modules", "x.js"));
const { ClientFactory } = require("@a2a-js/sdk/client");
const { Role, TaskState } = require("@a2a-js/sdk");

const [base] = process.argv.slice(2);
const client = await new ClientFactory().createFromUrl(base);
const context = `a2a-budget-${process.pid}`;
let n = 0;
const message = (text) => ({
  message: { messageId: `m${++n}`, role: Role.ROLE_USER, contextId: context, parts: [{ content: { $case: "text", value: text } }] },
});
const stateName = (s) => TaskState[s];
const textOf = (m) => (m?.parts || []).filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");

const seen = {};
const first = await client.sendMessage(message("look around"));
seen.first = { id: first.id, state: stateName(first.status.state), status: textOf(first.status.message) };

const paused = await client.sendMessage(message("look again"));
seen.paused = {
  id: paused.id,
  state: stateName(paused.status.state),
  status: textOf(paused.status.message),
  noetic: paused.metadata?.noetic ?? null,
};
const got = await client.getTask({ id: paused.id });
seen.got = stateName(got.status.state);

const raised = await fetch(`${base}/api/sessions/${context}/budget`, {
  method: "PUT",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ turn: { tool_calls: 5 } }),
}).then((r) => r.json());
seen.raised = raised.continued ?? null;
// The queued message runs as that task: poll it to its end (bounded).
let after = null;
for (let i = 0; i < 600; i += 1) {
  after = await client.getTask({ id: paused.id });
  if (["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"].includes(stateName(after.status.state))) break;
  await new Promise((r) => setTimeout(r, 50));
}
seen.after = { state: stateName(after.status.state), answer: textOf(after.artifacts?.[0]) };
console.log(JSON.stringify(seen));
