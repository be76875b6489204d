"""Seconds per GRPO step: TRL's ``GRPOTrainer`` vs our ``agent-rl train`` path, equal work, one run.

Both sides train the same tiny Qwen2 checkpoint on the same single-turn "What is a+b?" prompts
(``agent_rl/Arithmetic-v0``, difficulty 1, no tools, ChatML template): 8 prompts x 8 samples =
64 completions per step, exactly 32 new tokens each (end-of-sequence ignored), temperature 1.0,
no KL, lr 1e-4, one optimizer step per generation batch, CPU, fp32. Step 0 is a warm-up; the
``--steps`` after it are timed. Each side runs in its own subprocess (no shared torch state),
``--rounds`` times in alternating order, so a load change on a shared machine hits both sides.

    python bench/vs_trl.py [--steps 6] [--model DIR] [--threads N] [--rounds 2]

Prints a table and ``speedup = trl_s_per_step / ours_s_per_step``. Needs the ``bench`` extra (trl).
On a shared, loaded machine pass ``--threads 1``: two OpenMP threads on two busy cores stall at
every parallel region, and the wall times then measure the scheduler more than either trainer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS_PER_STEP = 8
GROUP_SIZE = 8
NEW_TOKENS = 32
LR = 1e-4
TEMPERATURE = 1.0
SEED = 0
ENV_OPTIONS = "{difficulty: [1], use_tool: false, max_turns: 1}"
RESULT_TAG = "BENCH_RESULT "


# -- prompts shared by both sides --------------------------------------------------------------
def step_prompts(step: int) -> list[tuple[list[dict], int]]:
    """(messages, answer) of the 8 prompts our trainer draws at ``step`` (same derived seeds)."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers agent_rl/Arithmetic-v0)
    from agent_rl.trainer import task_seed

    env = gym.make("agent_rl/Arithmetic-v0", difficulty=[1], use_tool=False, max_turns=1)
    out = []
    for i in range(PROMPTS_PER_STEP):
        messages, info = env.reset(seed=task_seed(SEED, step, 0, i), options={"split": "train"})
        out.append((messages, int(info["task"]["answer"])))
    env.close()
    return out


def answer_reward(text: str, answer: int) -> float:
    m = re.search(r"<answer>\s*(-?[\d,]+)\s*</answer>", text)
    return 1.0 if m is not None and int(m.group(1).replace(",", "")) == answer else 0.0


# -- our side ----------------------------------------------------------------------------------
def run_ours(model_dir: str, steps: int, run_root: str) -> dict:
    import torch

    from agent_rl.config import load_config
    from agent_rl.trainer import Trainer

    overrides = [
        f"model.path={model_dir}",
        f"env.options={ENV_OPTIONS}",
        "sandbox.backend=process",
        f"rollout.group_size={GROUP_SIZE}",
        "rollout.max_turns=1",
        f"rollout.max_new_tokens={NEW_TOKENS}",
        "rollout.ignore_eos=true",
        f"rollout.temperature={TEMPERATURE}",
        "rollout.max_total_tokens=256",
        f"trainer.prompts_per_step={PROMPTS_PER_STEP}",
        f"trainer.seed={SEED}",
        "trainer.eval_every=0",
        "algorithm.kl.coef=0",
        f"learner.lr={LR}",
        f"learner.micro_batch_size={PROMPTS_PER_STEP * GROUP_SIZE}",
        "tracking.tensorboard=false",
        "tracking.progress=false",
        "tracking.save_trajectories=0",
        f"run.root={run_root}",
    ]
    cfg = load_config(None, overrides)
    trainer = Trainer(cfg, log=lambda *a, **k: None)
    learner_s: list[float] = []
    update = trainer.learner.update

    def timed_update(*args, **kwargs):
        t0 = time.perf_counter()
        out = update(*args, **kwargs)
        learner_s.append(time.perf_counter() - t0)
        return out

    trainer.learner.update = timed_update
    step_s, cpu_s, gen_s, rewards = [], [], [], []
    completions = PROMPTS_PER_STEP * GROUP_SIZE
    for step in range(steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        m = trainer.step(step)
        step_s.append(time.perf_counter() - t0)
        cpu_s.append(time.process_time() - c0)
        # equal work: 64 episodes of one turn; no turn exceeds 32 tokens, so 64 * 32 in all means
        # every completion has exactly 32, and all of them are trained on
        assert m["rollout/episodes"] == completions and m["rollout/turns_mean"] == 1.0, m
        assert m["rollout/generated_tokens"] == completions * NEW_TOKENS, m
        assert m["train/tokens"] == completions * NEW_TOKENS, m
        gen_s.append(m.get("time/generate_s", 0.0))
        rewards.append(m["rollout/reward_mean"])
    trainer.engine.close()
    return {
        "step_s": step_s,
        "cpu_s": cpu_s,
        "rollout_s": [s - u for s, u in zip(step_s, learner_s, strict=True)],  # env, batch, advantages too
        "generate_s": gen_s,
        "update_s": learner_s,
        "completions": int(m["rollout/episodes"]),
        "tokens_per_completion": int(m["rollout/generated_tokens"]) // int(m["rollout/episodes"]),
        "reward_mean": rewards,
        "threads": torch.get_num_threads(),
    }


# -- TRL side ----------------------------------------------------------------------------------
def run_trl(model_dir: str, steps: int, out_dir: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": msgs, "answer": a} for s in range(steps + 1) for msgs, a in step_prompts(s)]
    dataset = Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    rewards: list[float] = []

    def reward_answer(completions, answer, **kwargs):
        r = [answer_reward(c[0]["content"], a) for c, a in zip(completions, answer, strict=True)]
        rewards.append(sum(r) / len(r))
        return r

    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP_SIZE,  # one step = 64 completions
        gradient_accumulation_steps=1,
        steps_per_generation=1,  # one optimizer step per generation batch
        num_iterations=1,
        num_generations=GROUP_SIZE,
        max_completion_length=NEW_TOKENS,
        generation_kwargs={"min_new_tokens": NEW_TOKENS},  # EOS masked until 32 tokens: exactly 32
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=steps + 1,
        shuffle_dataset=False,
        gradient_checkpointing=False,  # TRL's default is True; ours does not checkpoint
        use_cpu=True,
        bf16=False,
        fp16=False,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=SEED,
    )

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.begin, self.cpu_begin, self.step_s, self.cpu_s = 0.0, 0.0, [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin, self.cpu_begin = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_s.append(time.perf_counter() - self.begin)
            self.cpu_s.append(time.process_time() - self.cpu_begin)

    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_answer,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    gen_s: list[float] = []
    lengths: list[list[int]] = []
    generate = trainer._generate_and_score_completions

    def timed_generate(inputs):
        t0 = time.perf_counter()
        out = generate(inputs)
        gen_s.append(time.perf_counter() - t0)
        lengths.append(out["completion_mask"].sum(1).tolist())
        return out

    trainer._generate_and_score_completions = timed_generate
    trainer.train()
    assert len(timer.step_s) == steps + 1, timer.step_s
    completions = {len(x) for x in lengths}
    per_completion = {n for x in lengths for n in x}
    # equal work: 64 completions per step, each exactly 32 tokens, all of them trained on
    assert len(lengths) == steps + 1 and completions == {PROMPTS_PER_STEP * GROUP_SIZE}, completions
    assert per_completion == {NEW_TOKENS}, per_completion
    return {
        "step_s": timer.step_s,
        "cpu_s": timer.cpu_s,
        "rollout_s": gen_s,  # generation + reward + advantages
        "update_s": [s - g for s, g in zip(timer.step_s, gen_s, strict=True)],
        "completions": completions.pop(),
        "tokens_per_completion": per_completion.pop(),
        "reward_mean": rewards,
        "threads": torch.get_num_threads(),
    }


# -- driver ------------------------------------------------------------------------------------
def _child(side: str, model_dir: str, steps: int, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--side", side, "--model", model_dir]
    cmd += ["--steps", str(steps), "--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"{side} side failed (exit {proc.returncode})")
    line = next(ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_TAG))
    return json.loads(line[len(RESULT_TAG) :])


def _pooled(runs: list[dict]) -> dict:
    """Timed steps of every round of one side (each round's warm-up step dropped)."""
    return {
        "step_s": [x for r in runs for x in r["step_s"][1:]],
        "cpu_s": [x for r in runs for x in r["cpu_s"][1:]],
        "rollout_s": [x for r in runs for x in r["rollout_s"][1:]],
        "update_s": [x for r in runs for x in r["update_s"][1:]],
        "generate_s": [x for r in runs for x in r.get("generate_s", r["rollout_s"])[1:]],
        "warmup_s": [r["step_s"][0] for r in runs],
        "completions": {r["completions"] for r in runs},
        "tokens": {r["tokens_per_completion"] for r in runs},
        "reward": statistics.mean(x for r in runs for x in r["reward_mean"][1:]),
        "threads": {r["threads"] for r in runs},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6, help="timed steps after one warm-up step")
    p.add_argument("--model", default=None, help="tiny checkpoint dir (default: built into a temp dir)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for both sides (default: torch's)")
    p.add_argument("--rounds", type=int, default=2, help="runs per side, order alternating (trl, ours, ours, trl, ...)")
    p.add_argument("--side", choices=["both", "ours", "trl"], default="both", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.steps < 1 or a.rounds < 1:
        raise SystemExit("--steps and --rounds must be >= 1")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    if a.side != "both":
        with tempfile.TemporaryDirectory() as tmp:
            result = run_ours(a.model, a.steps, tmp) if a.side == "ours" else run_trl(a.model, a.steps, tmp)
        print(RESULT_TAG + json.dumps(result), flush=True)
        return

    import transformers
    import trl

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
        f"cpu cores {os.cpu_count()}, torch threads {torch.get_num_threads()}, load avg {os.getloadavg()[0]:.1f}"
    )
    print(
        f"workload: {PROMPTS_PER_STEP} prompts x {GROUP_SIZE} samples = "
        f"{PROMPTS_PER_STEP * GROUP_SIZE} completions/step, "
        f"{NEW_TOKENS} new tokens each (EOS ignored), T={TEMPERATURE}, lr={LR}, no KL, fp32 CPU; "
        f"{a.rounds} round(s) per side of 1 warm-up + {a.steps} timed steps"
    )
    runs: dict[str, list[dict]] = {"trl": [], "ours": []}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = a.model
        if model_dir is None:
            from agent_rl.tiny import init_tiny

            transformers.utils.logging.disable_progress_bar()
            model_dir = str(init_tiny(Path(tmp) / "tiny"))
        for k in range(a.rounds):
            for side in ("trl", "ours") if k % 2 == 0 else ("ours", "trl"):
                runs[side].append(_child(side, model_dir, a.steps, torch.get_num_threads()))
                timed = " ".join(f"{s:.3f}" for s in runs[side][-1]["step_s"][1:])
                print(f"  round {k + 1} {side:<4}: {timed}", flush=True)
    res = {side: _pooled(r) for side, r in runs.items()}
    for side, r in res.items():  # equal work, checked on both sides
        assert r["completions"] == {PROMPTS_PER_STEP * GROUP_SIZE} and r["tokens"] == {NEW_TOKENS}, (side, r)
    header = (
        f"{'side':<5} {'s/step':>7} {'median':>7} {'min':>7} {'cpu s':>7} {'warm-up':>8} {'rollout':>8} {'update':>7}"
        f" {'compl/step':>10} {'tok/compl':>9} {'reward':>7}"
    )
    print(header)
    print("-" * len(header))
    for side in ("trl", "ours"):
        r = res[side]
        print(
            f"{side:<5} {statistics.mean(r['step_s']):>7.3f} {statistics.median(r['step_s']):>7.3f}"
            f" {min(r['step_s']):>7.3f}"
            f" {statistics.mean(r['cpu_s']):>7.3f}"
            f" {statistics.mean(r['warmup_s']):>8.3f} {statistics.mean(r['rollout_s']):>8.3f}"
            f" {statistics.mean(r['update_s']):>7.3f} {min(r['completions']):>10} {min(r['tokens']):>9}"
            f" {r['reward']:>7.3f}"
        )
    print("(s/step, median, min: wall seconds of a timed step; cpu s: process CPU seconds per step, all threads;")
    print(" rollout: trl = generate + reward + advantages, ours = step - learner update; update: the rest)")
    o = res["ours"]
    gen, rollout = statistics.mean(o["generate_s"]), statistics.mean(o["rollout_s"])
    print(
        f"ours per step: generate {gen:.3f} s, env + batch + advantages {rollout - gen:.3f} s, "
        f"learner update {statistics.mean(o['update_s']):.3f} s"
    )
    trl_s, ours_s = statistics.mean(res["trl"]["step_s"]), statistics.mean(res["ours"]["step_s"])
    median_ratio = statistics.median(res["trl"]["step_s"]) / statistics.median(res["ours"]["step_s"])
    cpu_ratio = statistics.mean(res["trl"]["cpu_s"]) / statistics.mean(res["ours"]["cpu_s"])
    print(f"trl_s_per_step = {trl_s:.3f}, ours_s_per_step = {ours_s:.3f}")
    print(f"(ratio of medians {median_ratio:.2f}; ratio of CPU seconds {cpu_ratio:.2f})")
    print(f"speedup = {trl_s / ours_s:.2f}")


if __name__ == "__main__":
    main()
