"""Issue 24 item 3: on an env with a verifier, a reward model trained on the verifier's labels ranks
held-out pairs better than chance, in CI.

Pairs of ``Arithmetic-v0`` (difficulty 2) episodes of the quickstart's weak teacher on one question,
each labelled by the env's verifier: the python call, its result and the right answer (1.0) vs an
answer from mental arithmetic that the verifier rejects (0.0). ``agent-rl train-rm``'s trainer fits
a Bradley-Terry head from the random-init tiny model; chance is 0.5 (an untrained head ties).

What the reward model can use here is the env's real signal in this data: the episodes that used the
tool passed. bench/rm_arithmetic.py is the harder version (both responses call the tool, the wrong
answer is off by 1-3, so only the numbers differ): 0.800 held out after 300 steps of 16 pairs; at
100 steps (lr 3e-3) it gave 0.725 on seed 0 and 0.500 on seed 1, too slow and too seed-dependent
for CI.

Measured with this budget (200 pairs, 40 held out, 30 steps of 8 pairs, lr 1e-3; ~10 s of CPU
per seed): held-out pair accuracy 1.000 on each of seeds 0, 1, 2, 3, 4 (train accuracy 1.000); the
test asserts >= 0.9 on seed 0, a margin of at least 0.4 over chance.
"""

from __future__ import annotations

import asyncio
import json
import random

import gymnasium as gym

import envs  # noqa: F401  (registers the envs)
from agent_rl.commands.train_rm import RewardModelConfig, train_reward_model
from envs.arithmetic.policies import answer_text, tool_call_text, weak_teacher

PAIRS, HELDOUT_FRAC, STEPS, BATCH, LR = 200, 0.2, 30, 8, 1e-3
THRESHOLD = 0.9


def verified_pairs(n: int, seed: int = 0, check_tool: int = 2) -> list[dict]:
    """``n`` pairs of the weak teacher's two behaviours on the same question, labelled by
    Arithmetic-v0's verifier: the python call, its result and the answer (1.0) vs an answer from
    mental arithmetic that the verifier rejects (0.0; questions it would get right are skipped). The
    first ``check_tool`` pairs run the real tool; the rest write its output (the value) directly."""
    env = gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process", difficulty=[2], max_turns=3).unwrapped
    rng = random.Random(seed)

    async def pair(task_seed: int, real_tool: bool) -> dict | None:
        prompt, info = await env.areset(seed=task_seed, options={"split": "train"})
        task = info["task"]
        call = tool_call_text(task["expression"])
        result = [{"role": "tool", "content": str(task["answer"])}]
        if real_tool:
            assert (await env.astep(call))[0] == result, "the python tool prints the value"
        await env.areset(seed=task_seed, options={"split": "train"})
        right = (await env.astep(answer_text(task["answer"])))[1]  # the verifier on the final answer
        await env.areset(seed=task_seed, options={"split": "train"})
        direct = weak_teacher(prompt, rng, p_direct=1.0)
        if (await env.astep(direct))[1] != 0.0:
            return None  # mental arithmetic got it right: no pair
        assert right == 1.0
        chosen = [
            {"role": "assistant", "content": call},
            *result,
            {"role": "assistant", "content": answer_text(task["answer"])},
        ]
        return {"prompt": prompt, "chosen": chosen, "rejected": [{"role": "assistant", "content": direct}]}

    out, task_seed = [], 0
    try:
        while len(out) < n:
            found = asyncio.run(pair(task_seed, len(out) < check_tool))
            out += [found] if found else []
            task_seed += 1
        return out
    finally:
        env.close()


def heldout_accuracy(tmp_path, model_dir, seed: int = 0, steps: int = STEPS) -> dict:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in verified_pairs(PAIRS, seed)))
    cfg = RewardModelConfig(data=str(data), model=str(model_dir), out=str(tmp_path / "rm"), steps=steps, batch_pairs=BATCH,
                            lr=LR, heldout_frac=HELDOUT_FRAC, seed=seed)  # fmt: skip
    return train_reward_model(cfg, log=lambda *a: None)


def test_reward_model_ranks_heldout_pairs_above_chance(tmp_path, tiny_model_dir):
    metrics = heldout_accuracy(tmp_path, tiny_model_dir)
    assert metrics["heldout_pairs"] == 40 and metrics["heldout_accuracy_before"] == 0.5
    assert metrics["heldout_accuracy"] >= THRESHOLD, metrics
