"""Checks of the MCP tasks extension and of input-required results a plugin asks for
several things at once, against `toolhost serve --mcp http` with the conformance fixture
plugin, speaking the 2026-07-28 protocol by hand (no SDK client has the tasks extension):
every request is a new HTTP connection, so each task also outlives the connection (the
client's "reconnect") that started it.

Usage: task_checks.py URL TOKEN OTHER_TOKEN
Prints one line per check passed; exits non-zero with the reason on the first failure.
"""

import json
import sys
import time
import urllib.error
import urllib.request

URL, TOKEN, OTHER = sys.argv[1:4]
TASKS = "io.modelcontextprotocol/tasks"
# Bounded waits on conditions (a loaded CI machine is slow; nothing here waits for time).
DEADLINE = 60.0
ids = iter(range(1, 1_000_000))


def fail(why: str) -> None:
    print(f"FAILED: {why}", flush=True)
    sys.exit(1)


def note(what: str) -> None:
    print(f"ok: {what}", flush=True)


def rpc(method: str, params: dict, capabilities: dict, token: str = TOKEN, name: str | None = None):
    """One request on a new connection: (HTTP status, the JSON-RPC response)."""
    request_id = next(ids)
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "task-checks", "version": "1.0.0"},
    }
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Authorization": f"Bearer {token}",
    }
    if name is not None:
        headers["Mcp-Name"] = name
    request = urllib.request.Request(URL, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    # A JSON body, or an event stream whose data lines hold the messages.
    messages = []
    for line in text.splitlines() if not text.lstrip().startswith("{") else [text]:
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if line.startswith("{"):
            messages.append(json.loads(line))
    for message in messages:
        if message.get("id") == request_id:
            return status, message
    fail(f"{method}: no response with id {request_id} in HTTP {status}: {text[:500]}")


def call(tool: str, arguments: dict, capabilities: dict, **extra):
    status, response = rpc(
        "tools/call", {"name": tool, "arguments": arguments, **extra}, capabilities, name=tool
    )
    return status, response


def result(response: dict) -> dict:
    if "result" not in response:
        fail(f"expected a result: {response}")
    return response["result"]


def task_request(method: str, task_id: str, capabilities: dict, token: str = TOKEN, **extra):
    return rpc(method, {"taskId": task_id, **extra}, capabilities, token=token, name=task_id)


def poll(task_id: str, capabilities: dict, until) -> dict:
    """tasks/get until `until(task)` holds (bounded)."""
    started = time.monotonic()
    while True:
        _, response = task_request("tasks/get", task_id, capabilities)
        task = result(response)
        if until(task):
            return task
        if time.monotonic() - started > DEADLINE:
            fail(f"task {task_id} never got there; last: {task}")
        time.sleep(0.05)


def text(call_result: dict) -> str:
    return "".join(block.get("text", "") for block in call_result.get("content", []))


def main() -> None:
    with_tasks = {"elicitation": {}, "sampling": {}, "roots": {}, "extensions": {TASKS: {}}}

    # A task polled to its result, from connections other than the one that started it.
    _, response = call("slow_compute", {"seconds": 0.3, "label": "polled"}, with_tasks)
    created = result(response)
    if created.get("resultType") != "task" or not created.get("taskId"):
        fail(f"slow_compute should have become a task: {created}")
    task_id = created["taskId"]
    done = poll(task_id, with_tasks, lambda t: t["status"] not in ("working", "input_required"))
    if done["status"] != "completed" or "computed polled" not in text(done.get("result", {})):
        fail(f"the task should have completed with its result: {done}")
    note("a task is polled to its result over new connections")

    # Another caller (another token) is told the task does not exist.
    _, response = task_request("tasks/get", task_id, with_tasks, token=OTHER)
    if response.get("error", {}).get("code") != -32602:
        fail(f"another token must not see the task: {response}")
    _, response = task_request("tasks/cancel", task_id, with_tasks, token=OTHER)
    if response.get("error", {}).get("code") != -32602:
        fail(f"another token must not cancel the task: {response}")
    note("another caller's tasks/get and tasks/cancel: unknown task")

    # A cancelled task cancels the plugin's call.
    _, response = call("slow_compute", {"seconds": 600, "label": "cancelled"}, with_tasks)
    task_id = result(response)["taskId"]
    poll(task_id, with_tasks, lambda t: t["status"] == "working")
    _, response = task_request("tasks/cancel", task_id, with_tasks)
    ack = result(response)
    if ack.get("resultType") != "complete" or "status" in ack:
        fail(f"tasks/cancel should answer an empty ack: {ack}")
    done = poll(task_id, with_tasks, lambda t: t["status"] != "working")
    if done["status"] != "cancelled":
        fail(f"a cancelled task should settle as cancelled: {done}")
    note("tasks/cancel stops the plugin's call; the task settles as cancelled")

    # A task's question: input_required on tasks/get, answered by tasks/update.
    _, response = call("confirm_delete", {"filename": "notes.txt"}, with_tasks)
    task_id = result(response)["taskId"]
    waiting = poll(task_id, with_tasks, lambda t: t["status"] == "input_required")
    if list(waiting.get("inputRequests", {})) != ["confirm"]:
        fail(f"the task should ask under the plugin's key: {waiting}")
    _, response = task_request(
        "tasks/update",
        task_id,
        with_tasks,
        inputResponses={"confirm": {"action": "accept", "content": {"confirm": True}}},
    )
    result(response)
    done = poll(task_id, with_tasks, lambda t: t["status"] not in ("working", "input_required"))
    if done["status"] != "completed" or text(done["result"]) != "deleted notes.txt":
        fail(f"the answered task should complete: {done}")
    note("a task's question is answered with tasks/update and the task completes")

    # Without the extension: a tool that may run as a task runs in the request; one that
    # must is refused with -32021 naming the extension.
    plain = {"elicitation": {}, "sampling": {}}
    _, response = call("slow_compute", {"seconds": 0, "label": "sync"}, plain)
    if result(response).get("resultType") != "complete":
        fail(f"without the extension the call should complete in its request: {response}")
    status, response = call("failing_job", {}, plain)
    error = response.get("error", {})
    if status != 400 or error.get("code") != -32021 or TASKS not in json.dumps(error.get("data")):
        fail(f"a required task without the extension: HTTP 400, -32021: {status} {response}")
    note("without the extension: tasks run in the request, a required one gets -32021")

    # A capability the plugin needed and the client did not declare: -32021 naming it.
    status, response = call("test_missing_capability", {}, {})
    error = response.get("error", {})
    if status != 400 or error.get("code") != -32021:
        fail(f"a missing sampling capability: HTTP 400, -32021: {status} {response}")
    if "sampling" not in error.get("data", {}).get("requiredCapabilities", {}):
        fail(f"-32021 should name sampling: {response}")
    note("a capability the client did not declare: -32021 naming it")

    # Three questions at once, under the plugin's keys; a retry that answers two is asked
    # the third again, with a new state; answering it completes the same call.
    tool = "test_input_required_result_multiple_inputs"
    _, response = call(tool, {}, plain | {"roots": {}})
    asked = result(response)
    if asked.get("resultType") != "input_required":
        fail(f"{tool} should ask: {asked}")
    if sorted(asked["inputRequests"]) != ["client_roots", "greeting", "user_name"]:
        fail(f"the three questions should come in one result: {asked}")
    answers = {
        "user_name": {"action": "accept", "content": {"name": "Ada"}},
        "greeting": {
            "role": "assistant",
            "content": {"type": "text", "text": "Good day"},
            "model": "checks",
        },
    }
    _, response = call(tool, {}, plain | {"roots": {}}, inputResponses=answers,
                       requestState=asked["requestState"])
    again = result(response)
    if list(again.get("inputRequests", {})) != ["client_roots"] or again.get(
        "requestState"
    ) == asked["requestState"]:
        fail(f"the unanswered question should be asked again with a new state: {again}")
    roots = {"client_roots": {"roots": [{"uri": "file:///srv/work", "name": "work"}]}}
    _, response = call(tool, {}, plain | {"roots": {}}, inputResponses=roots,
                       requestState=again["requestState"])
    final = result(response)
    said = text(final)
    if final.get("isError") or "Ada" not in said or "Good day" not in said or "1 roots" not in said:
        fail(f"the call should end with all three answers: {final}")
    note("three questions in one result; a partial answer is asked the rest; the call completes")

    # The state is single-use: the first state again is refused.
    _, response = call(tool, {}, plain | {"roots": {}}, inputResponses=answers,
                       requestState=asked["requestState"])
    if response.get("error", {}).get("code") != -32602:
        fail(f"a used state must be refused: {response}")
    note("a used requestState is refused")


main()
