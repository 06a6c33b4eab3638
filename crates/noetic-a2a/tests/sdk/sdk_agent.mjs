// An A2A agent built with the official SDK (@a2a-js/sdk's DefaultRequestHandler on express, JSON-RPC, A2A 1.0)
// for the tests of our A2A client. Its one skill, "echo", answers by what it is sent:
//
// * "ask …"  — asks a question (TASK_STATE_INPUT_REQUIRED: "Which colour?"); the reply completes the task with
//              "You chose <reply>."
// * "wait …" — works until the task is canceled (prints "started <task>" and then "canceled <task>" on stdout)
// * anything else — a working status, then the answer "echo: <text>" as two artifact chunks, then completed.
//
//   node sdk_agent.mjs   # prints "listening on http://127.0.0.1:PORT" once it serves
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NOETIC_A2A_SDK_DIR, "node_modules", "x.js"));
const express = require("express");
const { TaskState, Role } = require("@a2a-js/sdk");
const { DefaultRequestHandler, InMemoryTaskStore, AgentEvent } = require("@a2a-js/sdk/server");
const { jsonRpcHandler, agentCardHandler, UserBuilder } = require("@a2a-js/sdk/server/express");

const text = (value) => ({ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "" });
const message = (taskId, contextId, value) => ({
  messageId: `${taskId}-${Date.now()}-${Math.random()}`,
  contextId,
  taskId,
  role: Role.ROLE_AGENT,
  parts: [text(value)],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});
const status = (taskId, contextId, state, says) => AgentEvent.statusUpdate({
  taskId,
  contextId,
  status: { state, message: says ? message(taskId, contextId, says) : undefined, timestamp: new Date().toISOString() },
  metadata: undefined,
});
const chunk = (taskId, contextId, value, append) => AgentEvent.artifactUpdate({
  taskId,
  contextId,
  artifact: { artifactId: "answer", name: "answer", description: "", parts: [text(value)], metadata: undefined, extensions: [] },
  append,
  lastChunk: !append ? false : true,
  metadata: undefined,
});

const waiting = new Map();

const executor = {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const said = ctx.userMessage.parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");
    // A stream starts with the task, a new one or the one this message continues.
    bus.publish(AgentEvent.task(ctx.task ?? {
      id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() },
      artifacts: [], history: [ctx.userMessage], metadata: undefined,
    }));
    if (ctx.task && ctx.task.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED) {
      bus.publish(chunk(taskId, contextId, `You chose ${said}.`, false));
      bus.publish(status(taskId, contextId, TaskState.TASK_STATE_COMPLETED));
      bus.finished();
      return;
    }
    if (said.startsWith("ask")) {
      bus.publish(status(taskId, contextId, TaskState.TASK_STATE_INPUT_REQUIRED, "Which colour?"));
      bus.finished();
      return;
    }
    if (said.startsWith("wait")) {
      bus.publish(status(taskId, contextId, TaskState.TASK_STATE_WORKING, "waiting to be canceled"));
      console.log(`started ${taskId}`);
      await new Promise((resolve) => waiting.set(taskId, resolve));
      return;
    }
    bus.publish(status(taskId, contextId, TaskState.TASK_STATE_WORKING, "thinking"));
    bus.publish(chunk(taskId, contextId, "echo: ", false));
    bus.publish(chunk(taskId, contextId, said, true));
    bus.publish(status(taskId, contextId, TaskState.TASK_STATE_COMPLETED));
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    console.log(`canceled ${taskId}`);
    const task = waiting.get(taskId);
    bus.publish(status(taskId, "", TaskState.TASK_STATE_CANCELED));
    bus.finished();
    if (task) task();
  },
};

const app = express();
const server = app.listen(0, "127.0.0.1", () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  const card = {
    name: "sdk helper",
    description: "An agent built with the official A2A SDK.",
    supportedInterfaces: [{ url: `${base}/a2a`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" }],
    provider: undefined,
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [{ id: "echo", name: "Echo", description: "Says back what it is told.", tags: ["echo"], examples: ["hello"], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.use("/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: handler }));
  app.use("/a2a", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`listening on ${base}`);
});
