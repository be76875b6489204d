"""An agent program written against the official OpenAI client: nothing here comes from agent_rl.

It answers an arithmetic question, running the python code the model asks for, and returns the
model's answer. `agent-rl train` runs it once per episode against its capture proxy
(docs/agent-programs.md); pointed at any other OpenAI-compatible server it runs the same way.
"""

import re
import subprocess
import sys

from openai import OpenAI


def run_python(code: str) -> str:
    try:
        done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "error: timed out"
    return (done.stdout + done.stderr).strip()[-500:]  # stripped, as the env's python tool answers


def solve(base_url: str, task: dict) -> str | None:
    """The answer to ``task["messages"]`` (a system prompt and a question), or None."""
    client = OpenAI(base_url=base_url, api_key="unused")
    messages = list(task["messages"])
    for _ in range(3):
        reply = client.chat.completions.create(model=task["model"], messages=messages, tools=task["tools"])
        message = reply.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            found = re.search(r"<answer>(.*?)</answer>", message.content or "", re.DOTALL)
            return found.group(1).strip() if found else None
        for call in message.tool_calls:
            code = _code(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_python(code)})
    return None


def _code(arguments: str) -> str:
    import json

    try:
        return str(json.loads(arguments).get("code", ""))
    except (ValueError, AttributeError):
        return ""


if __name__ == "__main__":  # python examples/arithmetic_agent.py BASE_URL "What is 12 * 7?"
    system = "Use the python tool if it helps, then reply <answer>N</answer>."
    tool = {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code; returns what it prints.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
    question = [{"role": "system", "content": system}, {"role": "user", "content": sys.argv[2]}]
    print(solve(sys.argv[1], {"messages": question, "tools": [tool], "model": "policy"}))
