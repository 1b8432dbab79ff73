// A plugin's question and sampling request through the TypeScript MCP SDKs' own clients:
// v1 (`@modelcontextprotocol/sdk`, which speaks up to 2025-11-25: server requests) and v2
// (`@modelcontextprotocol/client`, which speaks 2026-07-28: input-required results). Each
// starts `toolhost serve --mcp stdio`, calls clarify (answered by its elicitation handler)
// and test_sampling (answered by its sampling handler), and checks what comes back.
//
//     node ts_checks.mjs v1|v2|v2-legacy TOOLHOST PLUGINS WORK
//
// v2 pins 2026-07-28 (`versionNegotiation`); v2-legacy is the same client on its default,
// the 2025 `initialize` sequence.
//
// Run from target/mcp-tools, where tests/mcp/setup.sh installs the SDKs.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [sdk, toolhost, plugins, work] = process.argv.slice(2);
const require = createRequire(`${process.cwd()}/package.json`);
const load = (name) => import(pathToFileURL(require.resolve(name)).href);

function fail(message) {
  console.log(`FAILED (${sdk}): ${message}`);
  process.exit(1);
}

const asked = [];
const sampled = [];
const onElicit = async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: { answer: "blue" } };
};
const onSample = async (request) => {
  const text = request.params.messages.at(-1).content.text;
  sampled.push(text);
  return { model: `ts-${sdk}-model`, role: "assistant", content: { type: "text", text: `sampled: ${text}` } };
};

let Client, StdioClientTransport;
const info = { name: `toolhost-ts-${sdk}-checks`, version: "1.0.0" };
const options = { capabilities: { elicitation: {}, sampling: {} } };
let client;
if (sdk === "v1") {
  ({ Client } = await load("@modelcontextprotocol/sdk/client/index.js"));
  ({ StdioClientTransport } = await load("@modelcontextprotocol/sdk/client/stdio.js"));
  const types = await load("@modelcontextprotocol/sdk/types.js");
  client = new Client(info, options);
  client.setRequestHandler(types.ElicitRequestSchema, onElicit);
  client.setRequestHandler(types.CreateMessageRequestSchema, onSample);
} else if (sdk === "v2" || sdk === "v2-legacy") {
  ({ Client } = await load("@modelcontextprotocol/client"));
  ({ StdioClientTransport } = await load("@modelcontextprotocol/client/stdio"));
  const negotiation = sdk === "v2" ? { versionNegotiation: { mode: { pin: "2026-07-28" } } } : {};
  client = new Client(info, { ...options, ...negotiation });
  client.setRequestHandler("elicitation/create", onElicit);
  client.setRequestHandler("sampling/createMessage", onSample);
} else {
  fail(`unknown SDK ${sdk}: v1, v2 or v2-legacy`);
}

const transport = new StdioClientTransport({
  command: toolhost,
  args: ["serve", "--mcp", "stdio", "--no-watch", "--plugins", plugins, "--control", `${work}/control-${sdk}.sock`],
  env: { ...process.env, XDG_CONFIG_HOME: work, XDG_STATE_HOME: `${work}/state`, TOOLHOST_LOG: "warn" },
});
await client.connect(transport);
const version = typeof client.getNegotiatedProtocolVersion === "function" ? client.getNegotiatedProtocolVersion() : "2025-11-25 or older";
console.log(`ok: connected (${sdk}), protocol ${version}`);

const text = (result) => (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");

const clarify = await client.callTool({ name: "clarify", arguments: { question: "Which colour?" } });
if (clarify.isError || text(clarify) !== "blue") fail(`clarify should return the answer: ${JSON.stringify(clarify)}`);
if (!asked.some((m) => m.includes("Which colour?"))) fail(`the question did not reach the handler: ${JSON.stringify(asked)}`);
console.log("ok: a plugin's question reaches the elicitation handler and its answer returns");

const sampling = await client.callTool({ name: "test_sampling", arguments: { prompt: "Say hi" } });
if (sampling.isError || text(sampling) !== "LLM response: sampled: Say hi") fail(`test_sampling should return the sampled text: ${JSON.stringify(sampling)}`);
if (sampled.at(-1) !== "Say hi") fail(`the sampling request did not reach the handler: ${JSON.stringify(sampled)}`);
console.log("ok: a plugin's sampling request reaches the sampling handler and its text returns");

await client.close();
console.log(JSON.stringify({ sdk, protocol: version }));
