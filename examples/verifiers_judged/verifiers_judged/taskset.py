"""A single-turn verifiers taskset scored by an LLM judge (verifiers 0.4.0's v1 API): a question with
no one right wording, and a ``vf.Judge`` that answers yes or no. The judge's endpoint and model are
the task config's ``judge`` (a ``vf.JudgeConfig``): ``agent_rl/Verifiers-v0`` sets them from
``env.options.judge_base_url`` and ``judge_model`` (docs/ecosystem.md)."""

import verifiers.v1 as vf

QUESTIONS = [
    "Name a fruit that is yellow.",
    "Name an animal that lives in the sea.",
    "Name a colour of the rainbow.",
    "Name a tool for cutting paper.",
]


class YesNoJudge(vf.Judge[bool]):
    prompt = "Question: {question}\nResponse: {response}\nDoes the response answer the question? Reply yes or no."

    def parse(self, response: vf.JudgeResponse[bool]) -> bool:
        return response.text.strip().lower().startswith("yes")


class JudgedTaskConfig(vf.TaskConfig):
    judge: vf.JudgeConfig = vf.JudgeConfig()
    """The judge's endpoint (``base_url``) and ``model``."""


class JudgedTask(vf.Task[vf.TaskData, vf.State, JudgedTaskConfig]):
    @vf.reward(weight=1.0)
    async def judged(self, trace: vf.Trace) -> float:
        judge = YesNoJudge(self.config.judge)
        verdict = await judge.evaluate(trace=trace, question=self.data.prompt_text, response=trace.last_reply)
        return 1.0 if verdict.parsed else 0.0


class JudgedConfig(vf.TasksetConfig):
    task: JudgedTaskConfig = JudgedTaskConfig()


class JudgedTaskset(vf.Taskset[JudgedTask, JudgedConfig]):
    def load(self):
        for question in QUESTIONS:
            yield JudgedTask(vf.TaskData(prompt=question), self.config.task)
