"""An agent built with the OpenAI Agents SDK (`pip install openai-agents`): nothing here comes from agent_rl.

The SDK's default model API is Responses (`/v1/responses`); the agent's python tool is a
`function_tool`. `agent-rl train` runs `solve` once per episode against its capture proxy
(docs/agent-programs.md), as it runs examples/arithmetic_agent.py.
"""

import logging
import re
import subprocess
import sys

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK would export traces to OpenAI: nothing leaves this machine
# the SDK logs "Error getting response" (no reason) for a failed model call, then raises the error: solve
# says what it caught, anything else propagates with its traceback
logging.getLogger("openai.agents").addFilter(lambda record: not record.getMessage().startswith("Error getting"))
said: set[str] = set()  # each reason for no answer is printed once, not once per episode


@function_tool
def python(code: str) -> str:
    """Run Python code; returns what it prints."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "error: timed out"
    return (done.stdout + done.stderr).strip()[-500:]  # stripped, as the env's python tool answers


async def solve(base_url: str, task: dict) -> str | None:
    """The answer to ``task["messages"]`` (a system prompt and a question), or None."""
    system, question = task["messages"][0]["content"], task["messages"][-1]["content"]
    async with AsyncOpenAI(base_url=base_url, api_key="unused") as client:
        agent = Agent(name="arithmetic", instructions=system, tools=[python], model=OpenAIResponsesModel(task["model"], client))
        try:
            result = await Runner.run(agent, question, max_turns=3)
        except (MaxTurnsExceeded, ModelBehaviorError) as e:  # no answer in 3 turns; a reply cut at the token limit
            if str(e) not in said:
                said.add(str(e))
                print(f"agents_sdk_agent: no answer (reward 0): {type(e).__name__}: {e}", file=sys.stderr)
            return None
    found = re.search(r"<answer>(.*?)</answer>", str(result.final_output), re.DOTALL)
    return found.group(1).strip() if found else None


if __name__ == "__main__":  # python examples/agents_sdk_agent.py BASE_URL "What is 12 * 7?"
    import asyncio

    system = "Use the python tool if it helps, then reply <answer>N</answer>."
    question = [{"role": "system", "content": system}, {"role": "user", "content": sys.argv[2]}]
    print(asyncio.run(solve(sys.argv[1], {"messages": question, "model": "policy"})))
