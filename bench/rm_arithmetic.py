"""A Bradley-Terry reward model trained on an env's verifier labels ranks held-out pairs better than chance.

Pairs from `Arithmetic-v0` (difficulty 2): the scripted teacher's python call and the tool's result,
then the right answer (the env's verifier gives 1.0) or the result off by 1-3 (0.0); both rewards are
checked by stepping the env. `agent-rl train-rm` then trains a reward model from `--model` on them and
reports the held-out pair accuracy (chance: 0.5).

    OMP_NUM_THREADS=1 python bench/rm_arithmetic.py --model DIR [--pairs 400] [--steps 300] [--out runs/rm_arithmetic]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path

import gymnasium as gym

import envs  # noqa: F401  (registers the envs)
from agent_rl.commands.train_rm import RewardModelConfig, train_reward_model
from agent_rl.run.progress import script_progress
from envs.arithmetic.policies import answer_text, tool_call_text


async def verified_pair(env, seed: int, rng: random.Random) -> dict:
    messages, info = await env.areset(seed=seed, options={"split": "train"})
    call = tool_call_text(info["task"]["expression"])
    obs, *_ = await env.astep(call)
    value = obs[0]["content"].strip()
    wrong = str(int(value) + rng.choice([-3, -2, -1, 1, 2, 3]))
    right_reward = (await env.astep(answer_text(value)))[1]
    await env.areset(seed=seed, options={"split": "train"})
    await env.astep(call)
    wrong_reward = (await env.astep(answer_text(wrong)))[1]
    assert (right_reward, wrong_reward) == (1.0, 0.0), (right_reward, wrong_reward)
    head = [{"role": "assistant", "content": call}, *obs]
    return {
        "prompt": messages,
        "chosen": head + [{"role": "assistant", "content": answer_text(value)}],
        "rejected": head + [{"role": "assistant", "content": answer_text(wrong)}],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="base model of the reward model (e.g. agent-rl init-model's tiny)")
    p.add_argument("--pairs", type=int, default=400)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--out", default="runs/rm_arithmetic")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = gym.make("agent_rl/Arithmetic-v0", sandbox_backend="process", difficulty=[2], max_turns=3).unwrapped
    rng = random.Random(0)
    data = out / "pairs.jsonl"
    progress = script_progress("bench/rm_arithmetic", args.pairs, unit="pair", line_every=max(1, args.pairs // 10))
    progress.phase("verified pairs (the env checks both answers)")
    with open(data, "w") as f:
        for seed in range(args.pairs):
            f.write(json.dumps(asyncio.run(verified_pair(env, seed, rng))) + "\n")
            progress.advance()
    env.close()
    progress.phase(f"training the reward model ({args.steps} steps)")
    cfg = RewardModelConfig(
        data=str(data),
        model=args.model,
        out=str(out / "rm"),
        steps=args.steps,
        batch_pairs=16,
        lr=1e-3,
        heldout_frac=0.2,
    )
    metrics = train_reward_model(cfg, log=progress.phase)  # its step lines ("train-rm step k/n: loss x") as phases
    print(json.dumps(metrics))
    progress.finish([data, out / "rm" / "metrics.json"], {"held-out accuracy": metrics["heldout_accuracy"]})


if __name__ == "__main__":
    main()
