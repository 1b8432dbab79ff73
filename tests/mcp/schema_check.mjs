// Compiles every served schema (the JSON list tests/mcp/model_view.py wrote) with Ajv and
// ajv-formats as the TypeScript MCP SDKs do (strict mode off), and fails on any warning
// Ajv prints (say, `unknown format "uint64" ignored in schema`) or compile error.
//
//     node schema_check.mjs SCHEMAS.json
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

// Resolved from the working folder: target/mcp-tools, where setup.sh installs them.
const require = createRequire(`${process.cwd()}/package.json`);
const Ajv = require("ajv").default;
const addFormats = require("ajv-formats").default ?? require("ajv-formats");

const said = [];
const logger = {
  log: (...m) => said.push(`log: ${m.join(" ")}`),
  warn: (...m) => said.push(`warn: ${m.join(" ")}`),
  error: (...m) => said.push(`error: ${m.join(" ")}`),
};
const ajv = new Ajv({ strict: false, logger });
addFormats(ajv);

const tools = JSON.parse(readFileSync(process.argv[2], "utf8"));
let compiled = 0;
for (const tool of tools) {
  for (const [what, schema] of [["inputSchema", tool.inputSchema], ["outputSchema", tool.outputSchema]]) {
    if (schema == null) continue;
    try {
      ajv.compile(schema);
      compiled += 1;
    } catch (e) {
      said.push(`error: ${tool.name}'s ${what} does not compile: ${e.message}`);
    }
  }
}
if (said.length > 0) {
  console.log(`FAILED: Ajv said ${said.length} things:\n${said.join("\n")}`);
  process.exit(1);
}
console.log(`ok: ${compiled} schemas of ${tools.length} tools compiled with no warning`);
