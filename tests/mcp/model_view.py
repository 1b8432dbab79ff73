"""What an MCP client and its model get from toolhost, through the official Python SDK
(PyPI `mcp` 2.x). Run by the Rust integration tests (tests/it/model_view.rs):

    model_view.py --toolhost BIN --config FILE --plugins DIR --workspace DIR
        --calls FILE --schemas OUT [--url URL --token TOKEN]

Lists the tools of the `coder` profile, writes their served schemas to OUT (for the Ajv
check) and checks each with Python's `jsonschema`: a valid schema, with no format the
validator does not know. Then makes each call of the JSON list in --calls and prints one
JSON object per call on a line: `{"name", "is_error", "content": [{"type", "text"}],
"structured"}`, for the Rust test to judge. Exits 1 with the reason when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import anyio
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def formats_in(schema: object, found: list[str]) -> list[str]:
    """Every `format` keyword's value in a schema (values under `enum`/`const` are data)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "format" and isinstance(value, str):
                found.append(value)
            elif key in ("properties", "patternProperties", "$defs", "definitions"):
                if isinstance(value, dict):
                    for sub in value.values():
                        formats_in(sub, found)
            elif key not in ("enum", "const", "default", "examples"):
                formats_in(value, found)
    elif isinstance(schema, list):
        for item in schema:
            formats_in(item, found)
    return found


def check_schema(tool: str, what: str, schema: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Draft202012Validator.check_schema(schema)
        known = Draft202012Validator.FORMAT_CHECKER.checkers
        unknown = [f for f in formats_in(schema, []) if f not in known]
        if unknown:
            raise AssertionError(f"{tool}'s {what} has formats jsonschema does not know: {unknown}")
        # A validator of it compiles and runs without a warning.
        Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).is_valid({})


async def main(a: argparse.Namespace) -> None:
    if a.url:
        server: object = streamable_http_client(
            a.url,
            http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {a.token}"}),
        )
    else:
        server = StdioServerParameters(
            command=a.toolhost,
            args=[
                "--config", a.config, "serve", "--mcp", "stdio", "--profile", "coder",
                "--plugins", a.plugins, "--workspace", a.workspace,
            ],
            env={"TOOLHOST_LOG": "warn", "XDG_STATE_HOME": a.state},
        )
    async with Client(server, read_timeout_seconds=120.0) as client:
        tools = (await client.list_tools()).tools
        served = []
        for t in tools:
            check_schema(t.name, "inputSchema", t.input_schema)
            if t.output_schema is not None:
                check_schema(t.name, "outputSchema", t.output_schema)
            served.append(
                {"name": t.name, "inputSchema": t.input_schema, "outputSchema": t.output_schema}
            )
        with open(a.schemas, "w") as f:
            json.dump(served, f)
        print(json.dumps({"listed": sorted(t.name for t in tools)}), flush=True)
        with open(a.calls) as f:
            calls = json.load(f)
        for call in calls:
            result = await client.call_tool(call["name"], call["arguments"])
            content = [
                {"type": block.type, "text": getattr(block, "text", None)}
                for block in result.content
            ]
            print(
                json.dumps(
                    {
                        "name": call["name"],
                        "is_error": bool(result.is_error),
                        "content": content,
                        "structured": result.structured_content,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name in ["toolhost", "config", "plugins", "workspace", "calls", "schemas", "state"]:
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--url")
    parser.add_argument("--token")
    try:
        anyio.run(main, parser.parse_args())
    except Exception as e:  # noqa: BLE001 - every failure is reported the same way
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
