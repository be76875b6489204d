"""``agent_rl/SearchQA-v0``: two-hop questions over a local synthetic knowledge base (``kb.py``) with
a ``search`` tool; ``agent_rl/SearchQA-R2-v0`` adds Search-R2's information-density reward.

Turn protocol: the agent calls ``search`` (``{"query": ...}``; in the env's tool format) and gets
the ``top_k`` best documents by BM25, each as ``[doc N] Title: text``, or answers
``<answer>X</answer>``. An answer ends the episode: reward 1 when it equals the question's answer
after SQuAD normalization (exact match), else 0. A malformed call, an unknown tool, a query that is
not a string and an action with neither a call nor an answer are error observations (reward 0,
``action_valid=False``); the turn budget then truncates. The search runs on the host: no sandbox.

Every step's info says which documents this turn retrieved (``retrieved``, in rank order) and
which ones answer the question (``evidence``), for the information-density reward (``rewards.py``).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from envs.rewards import ShapedEnv
from envs.search_qa.kb import Doc, knowledge_base, normalize
from envs.search_qa.rewards import InformationDensity
from envs.splits import check_split
from envs.tool_env import TaskStart, ToolEnv, TurnResult
from tools.base import Tool, ToolCall, ToolError
from tools.parsers import ParsedAction

SYSTEM_PROMPT = (
    "Answer the question using the search tool over a knowledge base. Search for one entity at a time, "
    "then reply <answer>X</answer> with the exact name or number."
)
ANSWER_HINT = "Call the search tool or reply <answer>X</answer>."


class SearchTool(Tool):
    name = "search"
    description = "Search the knowledge base; returns the best-matching documents, one per line."

    class Args(BaseModel):
        query: str = Field(description="what to look for, e.g. an entity's name")

    def __init__(self, top_k: int):
        self.top_k = top_k
        self.last: list[Doc] = []  # the documents of the latest call

    async def run(self, args: BaseModel) -> str:
        self.last = knowledge_base().search(args.query, self.top_k)  # type: ignore[attr-defined]
        if not self.last:
            return "no document matches the query"
        return "\n".join(f"[doc {d.doc_id}] {d.title}: {d.text}" for d in self.last)


class SearchQAEnv(ToolEnv):
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": [],
        "tools": ("search",),
        "reward": "1 when the one <answer> equals the answer (SQuAD-normalized exact match), else 0",
    }
    description = "two-hop questions over a synthetic knowledge base; search tool (BM25); exact match"
    tokenizer_corpus = "envs.search_qa.policies:corpus_conversations"
    sft_teacher = "envs.search_qa.policies:weak_teacher"
    tools = (SearchTool,)
    fenced_code = False
    action_hint = ANSWER_HINT

    def __init__(
        self,
        split: str = "train",
        max_turns: int = 4,
        top_k: int = 3,
        max_action_chars: int = 4096,
        tool_format: str = "hermes",
    ):
        if top_k < 1:
            raise ValueError(f"SearchQA-v0: top_k must be >= 1, got {top_k}")
        super().__init__(split=split, max_turns=max_turns, max_action_chars=max_action_chars, tool_format=tool_format)
        self.search_tool = SearchTool(top_k)
        self.question = None
        self.retrieved: list[int] = []  # this turn's retrieved document ids

    async def new_task(self, seed: int | None, split: str, options: dict[str, Any]) -> TaskStart:
        kb = knowledge_base()
        if seed is None:
            self.question = kb.by_task[options["task"]["task_id"]]
        else:
            pool = kb.split(check_split(split, self.splits))
            self.question = pool[seed % len(pool)]
        q = self.question
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q.question}]
        teacher = f"Verified answer: {q.answer}; the answer is found by searching {q.entity!r}, then {q.bridge!r}"
        return TaskStart(messages, q.task_id, q.to_dict(), teacher_context=teacher)

    async def call_tool(self, call: ToolCall) -> tuple[str, bool]:
        """``search`` runs here, on the host (no sandbox); any other name is an error observation."""
        if call.name != "search":
            return f"error: unknown tool '{call.name}'; available: search", False
        try:
            out = await self.search_tool(call.arguments)
        except ToolError as e:
            return f"error: {e}", False
        self.retrieved += [d.doc_id for d in self.search_tool.last]
        return out, True

    async def take_turn(self, text: str, parsed: ParsedAction) -> TurnResult:
        self.retrieved = []
        turn = await super().take_turn(text, parsed)
        turn.info.update(retrieved=list(self.retrieved), evidence=list(self.question.evidence))
        return turn

    async def score(self, answer: str, text: str) -> tuple[float, dict[str, Any]]:
        n_answers = text.count("<answer>")
        correct = n_answers == 1 and normalize(answer) == normalize(self.question.answer)
        return (1.0 if correct else 0.0), {"correct": correct}


def search_r2(**kwargs: Any) -> Any:
    """``agent_rl/SearchQA-R2-v0``: SearchQA-v0 (same keywords) with Search-R2's hybrid reward,
    exact match + ``InformationDensity`` (``envs/search_qa/rewards.py``, its defaults)."""

    return ShapedEnv(SearchQAEnv(**kwargs), [InformationDensity()])


search_r2.__signature__ = inspect.signature(SearchQAEnv)  # type: ignore[attr-defined]  (tool_format detection)
search_r2.tokenizer_corpus = SearchQAEnv.tokenizer_corpus  # type: ignore[attr-defined]
search_r2.sft_teacher = SearchQAEnv.sft_teacher  # type: ignore[attr-defined]
search_r2.metadata = {  # type: ignore[attr-defined]  (agent-rl envs list)
    **SearchQAEnv.metadata,
    "reward": "exact match (0/1) + (share of retrieved documents that are new evidence) when the answer is right",
}
