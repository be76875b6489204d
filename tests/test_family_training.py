"""The whole CPU path per model family (issue 19): init-model --family, SFT on the Arithmetic env's
teacher (demonstrations in the family's tool-call format), 2 RL steps (hf backend), eval; with the
masks checked against what the backend returned, the demos' calls parsed back, and the format and
layout the run picked."""

from __future__ import annotations

import json

import pytest

from agent_rl.commands.eval import run_eval
from agent_rl.commands.sft import demonstrations, sft
from agent_rl.config import load_config
from agent_rl.core.types import Trajectory
from agent_rl.models.families import FAMILIES
from agent_rl.run.envloader import bind_tool_format, load_policy, sft_teacher
from agent_rl.run.runtime import Components
from agent_rl.train.trainer import Trainer
from tests.conftest import ROOT
from tools.formats import get_format

QUICK = str(ROOT / "configs" / "quickstart.yaml")
# family -> (the tool-call format auto must pick, the layout select_layout must pick)
EXPECTED = {
    "qwen2.5": ("hermes", "concat"),
    "qwen3": ("hermes", "per_turn"),
    "llama3": ("llama3_json", "per_turn"),
    "mistral": ("mistral", "per_turn"),
    "gpt-oss": ("harmony", "per_turn"),
}


class RecordingBackend:
    """The run's backend, recording every (request, result) pair it hands back."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    async def generate(self, requests, seed=None):
        results = await self.inner.generate(requests, seed)
        self.calls += [(list(r.prompt_ids), list(res.token_ids)) for r, res in zip(requests, results, strict=True)]
        return results

    def __getattr__(self, name):
        return getattr(self.inner, name)


def overrides(model_dir, tmp_path) -> list[str]:
    return [
        f"model.path={model_dir}",
        f"run.root={tmp_path / 'runs'}",
        "sandbox.backend=process",
        "rollout.group_size=2",
        "rollout.max_new_tokens=32",
        "trainer.prompts_per_step=2",
        "trainer.steps=2",
        "tracking.loggers=[]",
        "tracking.progress=false",
        "tracking.save_trajectories=64",
        "sft.demos=8",
        "sft.batch_size=4",
        "sft.max_steps=2",
        "sft.eval_every_steps=2",
        "sft.eval_episodes=2",
        f"sft.out={tmp_path / 'sft'}",
        "eval.episodes=2",
        "eval.bootstrap=10",
    ]


def assert_masks_are_what_was_sampled(trajectories, calls, layout):
    """Mask 1 exactly on the ids the backend returned, each turn's ids returned for its own prompt."""
    returned = {(tuple(p), tuple(ids)) for p, ids in calls}
    assert trajectories
    for t in trajectories:
        expected = [0] * len(t.token_ids_T)
        for turn in t.turns_N:
            sampled = t.token_ids_T[turn.start : turn.end]
            prompt = turn.prompt_ids if layout == "per_turn" else t.token_ids_T[: turn.start]
            assert (tuple(prompt), tuple(sampled)) in returned
            expected[turn.start : turn.end] = [1] * len(sampled)
        assert t.loss_mask_T == expected


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_sft_rl_eval(tmp_path, family, family_model_dir):
    fmt_name, layout = EXPECTED[family]
    model_dir = family_model_dir(family)
    cfg = load_config(QUICK, overrides(model_dir, tmp_path))
    components = Components(cfg)
    assert (components.tool_format, cfg.rollout.layout) == (fmt_name, layout)
    fmt = get_format(fmt_name)

    # the teacher's demonstrations: calls in the family's format, parsed back; a call turn ends with
    # the format's end_of_calls when it has one (gpt-oss: <|call|>), else the eos
    teacher = bind_tool_format(load_policy(sft_teacher(cfg)), fmt_name)
    demos = [g.trajectories_G[0] for g in demonstrations(components, teacher, 8, seed=1)]
    called = 0
    for t in demos:
        for turn in t.turns_N:
            ids = t.token_ids_T[turn.start : turn.end]
            parsed = fmt.parse(components.renderer.assistant_text(ids), fenced_code=False)
            assert not parsed.errors and (parsed.answer is not None) != bool(parsed.tool_calls), parsed
            called += bool(parsed.tool_calls)
            if parsed.tool_calls:
                assert [c.name for c in parsed.tool_calls] == ["python"]
                end = fmt.end_of_calls or components.tokenizer.eos_token
                assert components.tokenizer.convert_ids_to_tokens(ids[-1]) == end
    assert called > 0 and sum(t.reward for t in demos) > 0

    sft_dir, _ = sft(cfg, log=lambda *_: None)
    cfg = load_config(QUICK, [*overrides(model_dir, tmp_path), f"model.path={sft_dir}", "run.name=rl"])
    trainer = Trainer(cfg, log=lambda *_: None)
    assert (trainer.components.tool_format, trainer.engine.cfg.layout) == (fmt_name, layout)
    recorder = trainer.engine.backend = RecordingBackend(trainer.engine.backend)
    run_dir = trainer.train()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    trajectories = [
        Trajectory.from_json(json.loads(line))
        for path in sorted((run_dir / "trajectories").glob("step_*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert len(trajectories) == 8
    assert_masks_are_what_was_sampled(trajectories, recorder.calls, layout)

    cfg = load_config(
        QUICK,
        [
            *overrides(model_dir, tmp_path),
            f"model.path={run_dir / 'checkpoints/step_000002/model'}",
            f"run.dir={tmp_path / 'eval'}",
        ],
    )
    result, out = run_eval(cfg, log=lambda *_: None)
    assert result.episodes + result.errors == 2
    assert json.loads((out / "eval.json").read_text())


@pytest.fixture(scope="module")
def family_tokenizers(family_model_dir):
    from agent_rl.models.loading import load_tokenizer

    return {name: load_tokenizer(str(family_model_dir(name))) for name in ("llama3", "gpt-oss")}


def test_llama3_ipython_results_are_truncated_like_tool_results(family_tokenizers):
    from agent_rl.rollout.render import ChatRenderer

    renderer = ChatRenderer(family_tokenizers["llama3"])
    long = " ".join(str(i) for i in range(50))
    n = len(renderer.encode(long))
    out, cut = renderer.truncate_observation(
        [{"role": "ipython", "content": long}, {"role": "user", "content": long}], 4
    )
    assert cut == 1 and out[1]["content"] == long  # a user message is never cut
    assert out[0]["content"] == renderer.decode(renderer.encode(long)[:4]) + f"\n...[truncated {n - 4} tokens]"


def test_scripted_call_turns_end_with_the_formats_end_of_calls(family_tokenizers):
    import asyncio

    from agent_rl.rollout.backends.base import GenerationRequest
    from agent_rl.rollout.backends.scripted import ScriptedBackend
    from agent_rl.rollout.render import ChatRenderer
    from tools.base import ToolCall

    tok = family_tokenizers["gpt-oss"]
    harmony = get_format("harmony")
    call = harmony.render_calls([ToolCall("python", {"code": "print(1)"})])
    stops = ChatRenderer(tok).stop_token_ids  # <|return|>, <|call|>, <|endoftext|>
    ends = []
    for text, tool_format in ((call, "harmony"), (harmony.render_reply("<answer>1</answer>"), "harmony"), (call, None)):
        backend = ScriptedBackend(lambda messages, rng, text=text: text, tok, tool_format=tool_format)
        request = GenerationRequest(prompt_ids=[0], max_new_tokens=64, stop_token_ids=stops, messages=[])
        [res] = asyncio.run(backend.generate([request]))
        ends.append(tok.convert_ids_to_tokens(res.token_ids[-1]))
    assert ends == ["<|call|>", "<|return|>", "<|return|>"]  # calls, a reply, calls of no known format
