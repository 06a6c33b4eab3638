// A thread paused over its budget, seen by the official AG-UI client (@ag-ui/client's HttpAgent), every event
// checked against @ag-ui/core's schemas: the run whose turn reaches the budget, then a second run input, which the
// server queues and answers with `noetic.run_routed` (routed "paused", the limit) and RUN_ERROR `budget_paused`;
// raising the limit (PUT /api/sessions/{thread}/budget) runs the queued message. Run by tests/serve_budget_protocols.rs:
//
//   node agui_budget.mjs BASE_URL
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_AGUI_CLIENT_DIR, "node_modules", "x.js"));
const { HttpAgent } = require("@ag-ui/client");
const { EventSchemas } = require("@ag-ui/core/schemas");

const [base] = process.argv.slice(2);
const url = `${base}/ag-ui/default`;
const thread = `agui-budget-${process.pid}`;
const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

function fail(why) {
  process.stderr.write(`${why}\n`);
  process.exit(1);
}

async function run(messages) {
  const events = [];
  const agent = new HttpAgent({ url, threadId: thread, initialMessages: messages });
  try {
    await agent.runAgent({}, {
      onEvent({ event }) {
        const parsed = EventSchemas.safeParse(event);
        if (!parsed.success) fail(`event ${JSON.stringify(event)} is not valid AG-UI: ${JSON.stringify(parsed.error.issues)}`);
        events.push(event);
      },
    });
  } catch (_) {
    // A RUN_ERROR ends the run with an error; the events say which.
  }
  return events;
}
const kinds = (events) => events.map((e) => (e.type === "CUSTOM" ? `CUSTOM:${e.name}` : e.type));
const u1 = { id: "u1", role: "user", content: "look around" };
const u2 = { id: "u2", role: "user", content: "look again" };

const seen = {};
const first = await run([u1]);
seen.first = kinds(first).filter((k) => k.startsWith("RUN_"));
seen.firstEnd = first[first.length - 1];

const second = await run([u1, u2]);
seen.second = kinds(second);
seen.routed = second.find((e) => e.name === "noetic.run_routed")?.value;
const snapshot = second.find((e) => e.type === "STATE_SNAPSHOT")?.snapshot;
seen.snapshotPaused = snapshot?.paused ?? null;
seen.snapshotQueued = snapshot?.queued?.map((q) => q.text);
seen.error = second.find((e) => e.type === "RUN_ERROR");

const raised = await fetch(`${base}/api/sessions/${thread}/budget`, {
  method: "PUT",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ turn: { tool_calls: 5 } }),
}).then((r) => r.json());
seen.raised = raised.continued ?? null;
// The queued message runs: poll the session (bounded) until its second turn ended.
let session = null;
for (let i = 0; i < 600; i += 1) {
  session = await fetch(`${base}/api/sessions/${thread}`).then((r) => r.json());
  if (session.turns === 2 && !session.busy) break;
  await new Promise((r) => setTimeout(r, 50));
}
const answers = session.history.filter((m) => m.role === "assistant" && m.content).map((m) => m.content);
seen.after = { turns: session.turns, busy: session.busy, paused: session.budget.paused, answer: answers[answers.length - 1] };
seen.warnings = warnings;
console.log(JSON.stringify(seen));
