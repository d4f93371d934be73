"""The seed's code-interpreter loop, through the forkbox SDK: a model (any
OpenAI-compatible chat-completions endpoint at $MODEL_URL; the test serves a
scripted one) asks for code with a run_code tool, the code runs in a sandbox
with sandbox.run_code, results go back, and the final answer is printed.

Usage: MODEL_URL=http://host/v1 SALES_CSV=sales.csv python3 interpreter_loop.py "question"
"""

import json
import os
import sys
import urllib.request

from forkbox.sandbox import Sandbox

SYSTEM_PROMPT = """You are an AI data analyst with access to a Python sandbox.
When the user asks a question that requires computation, data analysis, or
visualization, write and execute Python code using the run_code tool.
Files are stored in /workspace/."""

RUN_CODE_TOOL = {
    "type": "function",
    "function": {
        "name": "run_code",
        "description": "Execute Python code in a stateful sandbox. Use print() to show results.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code to execute"}},
            "required": ["code"],
        },
    },
}

MAX_ROUNDS = 10


def complete(messages):
    body = json.dumps({"model": os.environ.get("MODEL", "scripted"), "messages": messages,
                       "tools": [RUN_CODE_TOOL]}).encode()
    req = urllib.request.Request(os.environ["MODEL_URL"].rstrip("/") + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + os.environ.get("MODEL_KEY", "none")})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def tool_output(execution):
    """What the model sees of a cell: stdout, the results' text, the error."""
    out = "".join(execution.logs.stdout)
    if execution.logs.stderr:
        out += "\n[stderr]\n" + "".join(execution.logs.stderr)
    for r in execution.results:
        if r.text is not None:
            out += ("\n" if out else "") + r.text
        if r.png:
            out += "\n[a chart was drawn]"
    if execution.error:
        out += "\n[error] %s: %s\n%s" % (execution.error.name, execution.error.value, execution.error.traceback_text)
    return out or "(no output)"


def run_interpreter(user_message, csv_path):
    sandbox = Sandbox.create(cpus=1.0, memory_mb=2048, timeout_secs=600, allow_internet_access=False)
    print("sandbox", sandbox.id)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_message}]
    try:
        with open(csv_path, "rb") as f:
            info = sandbox.files.write("/workspace/sales.csv", f)
        print("uploaded", info.path, info.size)
        for _ in range(MAX_ROUNDS):
            response = complete(messages)
            msg = response["choices"][0]["message"]
            messages.append(msg)
            calls = msg.get("tool_calls") or []
            if not calls:
                return msg.get("content") or ""
            for call in calls:
                code = json.loads(call["function"]["arguments"])["code"]
                print("--- run_code ---\n" + code)
                execution = sandbox.run_code(code, timeout=60)
                output = tool_output(execution)
                print("--- output (execution_count %d) ---\n%s" % (execution.execution_count, output))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        return "(no answer after %d rounds)" % MAX_ROUNDS
    finally:
        sandbox.close()  # unnamed: close terminates it
        print("closed:", sandbox.info().state)


if __name__ == "__main__":
    question = sys.argv[1] if len(sys.argv) > 1 else "Which region is most profitable?"
    answer = run_interpreter(question, os.environ["SALES_CSV"])
    print("ANSWER:", answer)
    sys.exit(0 if answer and not answer.startswith("(no answer") else 1)
