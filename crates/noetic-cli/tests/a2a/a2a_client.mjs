// Drives `noetic serve`'s A2A endpoint with the official A2A client (@a2a-js/sdk's ClientFactory over JSON-RPC,
// protocol 1.0): fetches the agent card, streams a task whose command needs approval (TASK_STATE_INPUT_REQUIRED),
// answers it, steers the working task with a second message, approves the write the steering asked for with a
// blocking SendMessage, reads the task back, cancels another task, and checks the errors. Run by
// tests/serve_a2a.rs:
//
//   node a2a_client.mjs BASE_URL WORKSPACE TOKEN
//
// Prints one JSON line with what it saw; exits non-zero (with the reason on stderr) when a step fails.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_A2A_SDK_DIR, "node_modules", "x.js"));
const { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory } = require("@a2a-js/sdk/client");
const { Role, TaskState } = require("@a2a-js/sdk");

const [base, workspace, token] = process.argv.slice(2);

function fail(why) {
  process.stderr.write(`${why}\n`);
  process.exit(1);
}
function expect(cond, why) {
  if (!cond) fail(why);
}

const authed = (url, init = {}) => fetch(url, { ...init, headers: { ...(init.headers || {}), Authorization: `Bearer ${token}` } });
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authed })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: fetch }),
  }),
);

const seen = {};
const client = await factory.createFromUrl(base);
const card = await client.getAgentCard();
seen.card = {
  name: card.name,
  interface: card.supportedInterfaces.map((i) => [i.protocolBinding, i.protocolVersion, new URL(i.url).pathname]),
  streaming: card.capabilities.streaming,
  extension: card.capabilities.extensions.map((e) => e.uri),
  skills: card.skills.length,
  bearer: card.securitySchemes?.bearer?.scheme?.$case === "httpAuthSecurityScheme" ? card.securitySchemes.bearer.scheme.value.scheme : null,
};

let n = 0;
const message = (text, extra = {}) => ({
  message: { messageId: `m${++n}`, role: Role.ROLE_USER, parts: [{ content: { $case: "text", value: text } }], ...extra },
});
const stateName = (s) => TaskState[s];
const textOf = (m) => (m?.parts || []).filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");

/** Streams `params`; `onEvent` may act on an event. Returns the events as short descriptions, and the last status. */
async function stream(params, onEvent = async () => {}) {
  const kinds = [];
  const texts = new Map();
  let last = null;
  let task = null;
  for await (const event of client.sendMessageStream(params)) {
    const { $case, value } = event.payload;
    if ($case === "task") {
      task = value;
      last = value.status;
      kinds.push(`task:${stateName(value.status.state)}`);
    } else if ($case === "statusUpdate") {
      last = value.status;
      const what = value.metadata?.noetic?.event;
      kinds.push(what ? `${what}` : `status:${stateName(value.status.state)}`);
    } else if ($case === "artifactUpdate") {
      const id = value.artifact.artifactId;
      texts.set(id, (value.append ? texts.get(id) || "" : "") + textOf(value.artifact));
      kinds.push("artifact");
    } else {
      kinds.push($case);
    }
    await onEvent(event, kinds);
  }
  return { kinds, last, task, text: [...texts.values()].pop() };
}

const context = `a2a-e2e-${process.pid}`;
// 1. A task that streams until its first command waits for approval.
const first = await stream(message("run the checks", { contextId: context }));
expect(first.task, "the stream did not start with the task");
const taskId = first.task.id;
seen.taskId = taskId;
seen.first = first.kinds;
expect(stateName(first.last.state) === "TASK_STATE_INPUT_REQUIRED", `not input-required: ${JSON.stringify(first.kinds)}`);
const asked = first.last.message.parts.find((p) => p.content?.$case === "data")?.content.value;
seen.asked = asked.approvals.map((a) => [a.callId, a.tool]);

// 2. New input while it waits is refused.
try {
  await client.sendMessage(message("hello?", { contextId: context }));
  fail("a message while the task waits for approval was accepted");
} catch (e) {
  seen.blocked = e.data?.code ?? String(e);
}

// 3. Approve by replying to the task; once approved (its command runs), steer it with a second message; then let the
// command finish. The stream goes on until the write the steering asked for waits for approval.
let steered = null;
const resumed = await stream(message("approve", { taskId, contextId: context }), async (event) => {
  const meta = event.payload.value.metadata?.noetic;
  if (meta?.event === "approval_decided" && meta.callId === "c1" && !steered) {
    const answer = await client.sendMessage(message("skip the checks and write notes.txt instead", { taskId }));
    steered = { state: stateName(answer.status.state), routed: answer.metadata?.noetic?.routed, hasId: Boolean(answer.metadata?.noetic?.messageId) };
    fs.writeFileSync(path.join(workspace, "release"), "");
  }
});
seen.steered = steered;
seen.resumed = resumed.kinds;
seen.resumedText = resumed.text;
expect(stateName(resumed.last.state) === "TASK_STATE_INPUT_REQUIRED", `not input-required again: ${JSON.stringify(resumed.kinds)}`);

// 4. Approve the write with a blocking SendMessage: it answers with the finished task.
const done = await client.sendMessage({
  message: { messageId: `m${++n}`, role: Role.ROLE_USER, taskId, parts: [{ content: { $case: "data", value: { approved: true } } }] },
});
seen.done = { state: stateName(done.status.state), answer: textOf(done.artifacts?.[0]), status: textOf(done.status.message) };

// 5. Read back; a message to the finished task is refused; an unknown task is not found.
const got = await client.getTask({ id: taskId });
seen.got = stateName(got.status.state);
try {
  await client.sendMessage(message("more", { taskId }));
  fail("a message to a completed task was accepted");
} catch (e) {
  seen.ended = e.data?.code ?? String(e);
}
try {
  await client.getTask({ id: `${context}:99` });
  fail("an unknown task was found");
} catch (e) {
  seen.unknown = e.name;
}

// 6. Subscribe to a task (it waits for approval of its first command), cancel it, cancel it again.
const other = await client.sendMessage(message("run the checks", { contextId: `${context}-b` }));
seen.otherBefore = stateName(other.status.state);
// Subscribing to a task that waits for input gives the task as it is; to an ended one, an error.
const subscribed = [];
for await (const event of client.resubscribeTask({ id: other.id })) {
  subscribed.push(`${event.payload.$case}:${stateName(event.payload.value.status?.state)}`);
}
seen.subscribed = subscribed;
seen.subscribedEnded = await (async () => {
  try {
    for await (const _ of client.resubscribeTask({ id: taskId })) return "streamed";
    return "empty";
  } catch (e) {
    return e.cause?.name ?? e.name;
  }
})();
const canceled = await client.cancelTask({ id: other.id });
seen.canceled = stateName(canceled.status.state);
seen.canceledAgain = await client.cancelTask({ id: other.id }).then(() => "accepted", (e) => e.name);

// 7. Without the token: 401.
const anonymous = await fetch(`${base}/a2a`, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "GetTask", params: { id: taskId } }),
});
seen.anonymous = anonymous.status;
// A method A2A 1.0 does not have.
const unknownMethod = await authed(`${base}/a2a`, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tasks/frobnicate", params: {} }),
}).then((r) => r.json());
seen.unknownMethod = unknownMethod.error?.code;

console.log(JSON.stringify(seen));
