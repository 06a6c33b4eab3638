// Drives `noetic serve`'s AG-UI endpoint with the official client, @ag-ui/client's HttpAgent, and checks every
// event it receives against @ag-ui/core's schemas (zod): a turn with a tool call whose approval is an interrupt
// answered by a resume, a steering message sent as a second run input while a tool runs, the write the steering
// asked for approved through a second interrupt, new input refused while an interrupt is open, a resume sent twice,
// and runs with bad input that get RUN_ERROR. Run by tests/serve_agui.rs:
//
//   node agui_run.mjs BASE_URL WORKSPACE
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";

const require = createRequire(path.join(process.env.NOETIC_AGUI_CLIENT_DIR, "node_modules", "x.js"));
const { HttpAgent } = require("@ag-ui/client");
const { EventSchemas } = require("@ag-ui/core/schemas");

const [base, workspace] = process.argv.slice(2);
const url = `${base}/ag-ui/serve`;
const thread = `agui-e2e-${process.pid}`;

// The client strips and warns about anything the protocol does not describe: a warning is a failure here.
const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

function fail(why) {
  process.stderr.write(`${why}\n`);
  process.exit(1);
}

function expect(cond, why) {
  if (!cond) fail(why);
}

let checked = 0;
let deltas = 0;
/** Runs `agent` with `params`; every event is checked against the protocol's schema. */
async function run(agent, params = {}, onEvent = () => {}) {
  const events = [];
  let error = null;
  try {
    await agent.runAgent(params, {
      onEvent({ event }) {
        const parsed = EventSchemas.safeParse(event);
        if (!parsed.success) fail(`event ${JSON.stringify(event)} is not valid AG-UI: ${JSON.stringify(parsed.error.issues)}`);
        checked += 1;
        if (event.type === "STATE_DELTA") deltas += 1;
        events.push(event);
        if (process.env.AGUI_TRACE) process.stderr.write(`${event.type} ${event.name || ""}\n`);
        onEvent(event);
      },
    });
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  return { events, error };
}

const kinds = (events) => events.map((e) => (e.type === "CUSTOM" ? `CUSTOM:${e.name}` : e.type));
const last = (events) => events[events.length - 1];
const routed = (events) => events.find((e) => e.type === "CUSTOM" && e.name === "noetic.run_routed")?.value?.routed;
const agent = (messages = []) => new HttpAgent({ url, threadId: thread, initialMessages: messages });

const seen = {};

// 1. A message starts a turn; the first command needs approval: the run ends with an interrupt.
const main = agent([{ id: "u1", role: "user", content: "run the checks" }]);
const first = await run(main);
expect(!first.error, `the first run failed: ${first.error}`);
seen.first = kinds(first.events);
expect(routed(first.events) === "started", `the first run was not 'started': ${seen.first}`);
const firstEnd = last(first.events);
expect(firstEnd.type === "RUN_FINISHED" && firstEnd.outcome?.type === "interrupt", `the first run did not end with an interrupt: ${JSON.stringify(firstEnd)}`);
expect(main.pendingInterrupts.length === 1 && main.pendingInterrupts[0].toolCallId === "c1", `pending: ${JSON.stringify(main.pendingInterrupts)}`);
const c1 = main.pendingInterrupts[0];
seen.interrupt = { reason: c1.reason, toolCallId: c1.toolCallId, hasSchema: !!c1.responseSchema, hasExpiry: !!c1.expiresAt };

// 2. While the interrupt is open, new input is refused (the official client refuses it too, before sending).
const blocked = await run(agent([{ id: "u-blocked", role: "user", content: "are you there?" }]));
const blockedError = blocked.events.find((e) => e.type === "RUN_ERROR");
seen.blocked = blockedError?.code;
expect(seen.blocked === "interrupts_pending", `new input during an interrupt got ${JSON.stringify(blocked)}`);

// 3. The resume approves the command; while it runs, a second run input steers the turn; then the command ends.
let steering = null;
const resumed = await run(main, { resume: [{ interruptId: c1.id, status: "resolved", payload: { approved: true } }] }, (event) => {
  if (!steering && event.type === "CUSTOM" && event.name === "noetic.approval_decided" && event.value.call_id === "c1") {
    steering = run(agent([{ id: "u2", role: "user", content: "skip the checks and write notes.txt instead" }])).then((steer) => {
      fs.writeFileSync(path.join(workspace, "release"), "");
      return steer;
    });
  }
});
expect(!resumed.error, `the resumed run failed: ${resumed.error}`);
expect(steering, "the resumed run never said the command was approved");
const steer = await steering;
seen.steer = kinds(steer.events);
expect(!steer.error && routed(steer.events) === "steered", `the steering run was not 'steered': ${JSON.stringify(steer)}`);
seen.resumed = kinds(resumed.events);
const results = resumed.events.filter((e) => e.type === "TOOL_CALL_RESULT").map((e) => [e.toolCallId, e.content.trim()]);
seen.results = results;
seen.skipped = resumed.events.filter((e) => e.name === "noetic.tool_skipped").map((e) => e.value.call_id);
seen.injected = resumed.events.some((e) => e.name === "noetic.steering_injected");
seen.resumedText = resumed.events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
const resumedEnd = last(resumed.events);
expect(resumedEnd.type === "RUN_FINISHED" && resumedEnd.outcome?.type === "interrupt", `the resumed run did not stop at the write's approval: ${JSON.stringify(resumedEnd)}`);
const w1 = main.pendingInterrupts[0];
expect(w1 && w1.toolCallId === "w1", `pending after the steering: ${JSON.stringify(main.pendingInterrupts)}`);

// 4. The write is approved; the run streams the rest of the turn to its end.
const answer = { interruptId: w1.id, status: "resolved", payload: { approved: true } };
const finished = await run(main, { resume: [answer] });
expect(!finished.error, `the last run failed: ${finished.error}`);
seen.finished = kinds(finished.events);
seen.finishedText = finished.events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
const finishedEnd = last(finished.events);
expect(finishedEnd.type === "RUN_FINISHED" && !finishedEnd.outcome, `the last run did not finish: ${JSON.stringify(finishedEnd)}`);
expect(main.pendingInterrupts.length === 0, "interrupts left after the last run");
// The client's state is the run's first snapshot with every delta since applied (by the client, with JSON Patch).
const state = main.state;
seen.finalState = { busy: state.busy, queued: state.queued.length, approvals: state.pending_approvals.length };

// 5. The same resume again is a no-op, not an error.
const again = await run(agent(), { resume: [answer] });
seen.again = kinds(again.events);
expect(!again.error && last(again.events).type === "RUN_FINISHED", `a repeated resume failed: ${JSON.stringify(again)}`);
// The state the deltas built is the state a fresh snapshot (the first event of that run) gives.
const fresh = again.events.find((e) => e.type === "STATE_SNAPSHOT").snapshot;
expect(isDeepStrictEqual(state, fresh), `the deltas built ${JSON.stringify(state)}, a fresh snapshot says ${JSON.stringify(fresh)}`);
seen.deltasMatchSnapshot = true;

// 6. Bad input gets RUN_ERROR with the API's error code.
const badThread = await run(new HttpAgent({ url, threadId: "not a key!", initialMessages: [{ id: "x", role: "user", content: "hi" }] }));
seen.badThread = badThread.events.find((e) => e.type === "RUN_ERROR")?.code;
const raw = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", Accept: "text/event-stream" }, body: JSON.stringify({ threadId: 5 }) });
const rawEvents = (await raw.text()).split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)));
for (const e of rawEvents) {
  const parsed = EventSchemas.safeParse(e);
  if (!parsed.success) fail(`raw event ${JSON.stringify(e)} is not valid AG-UI`);
  checked += 1;
}
seen.badBody = { status: raw.status, events: kinds(rawEvents), code: rawEvents[0]?.code };
const unknown = await fetch(`${base}/ag-ui/nobody`, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
seen.unknownAgent = unknown.status;

seen.checked = checked;
seen.deltas = deltas;
seen.warnings = warnings;
console.log(JSON.stringify(seen));
