"""Seconds per GRPO step: TRL's ``GRPOTrainer`` vs our ``agent-rl train`` path, equal work, one run.

Both sides train the same tiny Qwen2 checkpoint on the same single-turn "What is a+b?" prompts
(``agent_rl/Arithmetic-v0``, difficulty 1, no tools, ChatML template): 8 prompts x 8 samples =
64 completions per step, exactly 32 new tokens each (end-of-sequence ignored), temperature 1.0,
no KL, lr 1e-4, one optimizer step per generation batch, CPU, fp32. Step 0 is a warm-up; the
``--steps`` after it are timed.

The two trainers run in one process, their steps interleaved (TRL step k, then our step k, from
a TRL callback), so a load change on a shared machine hits both sides alike. Each step is timed
on its own: TRL from ``on_step_begin`` to ``on_step_end``, ours around ``Trainer.step``.

    python bench/vs_trl.py [--steps 6] [--model DIR] [--threads N]

Prints a table and ``speedup = trl_s_per_step / ours_s_per_step``. Needs the ``bench`` extra (trl).
On a shared, loaded machine pass ``--threads 1``: two OpenMP threads on two busy cores stall at
every parallel region, and the wall times then measure the scheduler more than either trainer.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PROMPTS_PER_STEP = 8
GROUP_SIZE = 8
COMPLETIONS = PROMPTS_PER_STEP * GROUP_SIZE
NEW_TOKENS = 32
LR = 1e-4
TEMPERATURE = 1.0
SEED = 0
ENV_OPTIONS = "{difficulty: [1], use_tool: false, max_turns: 1}"


@dataclass
class Timings:
    """Per step (index 0 = warm-up): wall and process-CPU seconds, and the two phases."""

    step_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    rollout_s: list[float] = field(default_factory=list)  # sampling + reward + advantages
    update_s: list[float] = field(default_factory=list)  # the rest: logprobs, loss, backward, optimizer
    generate_s: list[float] = field(default_factory=list)  # ours only: the backend's sampling
    reward_mean: list[float] = field(default_factory=list)


# -- prompts shared by both sides --------------------------------------------------------------
def step_prompts(step: int) -> list[tuple[list[dict], int]]:
    """(messages, answer) of the 8 prompts our trainer draws at ``step`` (same derived seeds)."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers agent_rl/Arithmetic-v0)
    from agent_rl.task_sampler import TaskSampler

    env = gym.make("agent_rl/Arithmetic-v0", difficulty=[1], use_tool=False, max_turns=1)
    out = []
    for seed in TaskSampler(SEED, 0, []).draw(step, 0, PROMPTS_PER_STEP):  # the trainer's draw
        messages, info = env.reset(seed=seed, options={"split": "train"})
        out.append((messages, int(info["task"]["answer"])))
    env.close()
    return out


def answer_reward(text: str, answer: int) -> float:
    m = re.search(r"<answer>\s*(-?[\d,]+)\s*</answer>", text)
    return 1.0 if m is not None and int(m.group(1).replace(",", "")) == answer else 0.0


# -- our side ----------------------------------------------------------------------------------
class Ours:
    """Our ``agent-rl train`` path: ``Trainer`` from the config overrides, one ``step`` per call."""

    def __init__(self, model_dir: str, run_root: str):
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
            f"learner.micro_batch_size={COMPLETIONS}",
            "tracking.tensorboard=false",
            "tracking.progress=false",
            "tracking.save_trajectories=0",
            f"run.root={run_root}",
        ]
        self.trainer = Trainer(load_config(None, overrides), log=lambda *a, **k: None)
        self.t = Timings()
        update = self.trainer.learner.update

        def timed_update(*args, **kwargs):
            t0 = time.perf_counter()
            out = update(*args, **kwargs)
            self.t.update_s.append(time.perf_counter() - t0)
            return out

        self.trainer.learner.update = timed_update

    def step(self, step: int) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        m = self.trainer.step(step)
        self.t.step_s.append(time.perf_counter() - t0)
        self.t.cpu_s.append(time.process_time() - c0)
        self.t.rollout_s.append(self.t.step_s[-1] - self.t.update_s[-1])
        self.t.generate_s.append(m.get("time/generate_s", 0.0))
        self.t.reward_mean.append(m["rollout/reward_mean"])
        # equal work: 64 one-turn episodes; no turn exceeds 32 tokens, so 64 * 32 tokens in all
        # means every completion has exactly 32, and the learner trains on all of them
        assert m["rollout/episodes"] == COMPLETIONS and m["rollout/turns_mean"] == 1.0, m
        assert m["rollout/generated_tokens"] == COMPLETIONS * NEW_TOKENS, m
        assert m["train/tokens"] == COMPLETIONS * NEW_TOKENS, m

    def close(self) -> None:
        self.trainer.engine.close()


# -- TRL side ----------------------------------------------------------------------------------
def run_trl(model_dir: str, steps: int, out_dir: str, after_step) -> Timings:
    """Train ``steps + 1`` GRPO steps with TRL; ``after_step(k)`` runs after step k, untimed."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    # rows in step order (no shuffling): step k trains on the 8 prompts our trainer draws at k
    rows = [{"prompt": msgs, "answer": a} for s in range(steps + 1) for msgs, a in step_prompts(s)]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    t = Timings()

    def reward_answer(completions, answer, **kwargs):
        r = [answer_reward(c[0]["content"], a) for c, a in zip(completions, answer, strict=True)]
        t.reward_mean.append(sum(r) / len(r))
        return r

    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=COMPLETIONS,  # one step = 64 completions
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

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            t.step_s.append(time.perf_counter() - self.t0)
            t.cpu_s.append(time.process_time() - self.c0)
            after_step(state.global_step - 1)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_answer,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Interleave()],
    )
    lengths_N: list[list[int]] = []
    generate = trainer._generate_and_score_completions

    def timed_generate(inputs):
        t0 = time.perf_counter()
        out = generate(inputs)
        t.rollout_s.append(time.perf_counter() - t0)
        lengths_N.append(out["completion_mask"].sum(1).tolist())
        return out

    trainer._generate_and_score_completions = timed_generate
    with contextlib.redirect_stdout(io.StringIO()):  # TRL prints a metrics dict at the end
        trainer.train()
    t.update_s = [s - r for s, r in zip(t.step_s, t.rollout_s, strict=True)]
    # equal work: 64 completions per step, each exactly 32 tokens, all of them trained on
    assert len(t.step_s) == len(lengths_N) == steps + 1, (t.step_s, len(lengths_N))
    assert {len(x) for x in lengths_N} == {COMPLETIONS}, [len(x) for x in lengths_N]
    assert {n for x in lengths_N for n in x} == {NEW_TOKENS}, lengths_N
    return t


# -- driver ------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6, help="timed steps after one warm-up step")
    p.add_argument("--model", default=None, help="tiny checkpoint dir (default: built into a temp dir)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for both sides (default: torch's)")
    a = p.parse_args()
    if a.steps < 1:
        raise SystemExit("--steps must be >= 1")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch
    import transformers
    import trl

    if a.threads:
        torch.set_num_threads(a.threads)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
        f"cpu cores {os.cpu_count()}, torch threads {torch.get_num_threads()}, load avg {os.getloadavg()[0]:.1f}"
    )
    print(
        f"workload: {PROMPTS_PER_STEP} prompts x {GROUP_SIZE} samples = {COMPLETIONS} completions/step, "
        f"{NEW_TOKENS} new tokens each (EOS ignored), T={TEMPERATURE}, lr={LR}, no KL, fp32 CPU; "
        f"1 warm-up + {a.steps} timed steps per side, interleaved"
    )
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = a.model
        if model_dir is None:
            from agent_rl.tiny import init_tiny

            model_dir = str(init_tiny(Path(tmp) / "tiny"))
        ours = Ours(model_dir, str(Path(tmp) / "runs"))
        trl_t = run_trl(model_dir, a.steps, str(Path(tmp) / "trl"), after_step=ours.step)
        ours.close()
    res = {"trl": trl_t, "ours": ours.t}
    assert len(ours.t.step_s) == a.steps + 1, ours.t.step_s

    def mean(xs: list[float]) -> float:
        return statistics.mean(xs[1:])  # drop the warm-up step

    header = (
        f"{'side':<5} {'s/step':>7} {'median':>7} {'min':>7} {'cpu s':>7} {'warm-up':>8} {'rollout':>8}"
        f" {'update':>7} {'compl/step':>10} {'tok/compl':>9} {'reward':>7}"
    )
    print(header)
    print("-" * len(header))
    for side, t in res.items():
        timed = t.step_s[1:]
        print(
            f"{side:<5} {statistics.mean(timed):>7.3f} {statistics.median(timed):>7.3f} {min(timed):>7.3f}"
            f" {mean(t.cpu_s):>7.3f} {t.step_s[0]:>8.3f} {mean(t.rollout_s):>8.3f} {mean(t.update_s):>7.3f}"
            f" {COMPLETIONS:>10} {NEW_TOKENS:>9} {mean(t.reward_mean):>7.3f}"
        )
    for side, t in res.items():
        print(f"{side + ' steps':<10} " + " ".join(f"{s:.3f}" for s in t.step_s[1:]))
    print("(wall seconds per timed step; cpu s: process CPU seconds per step, all threads;")
    print(" rollout: sampling + reward + advantages; update: the rest, i.e. logprobs, loss, backward, AdamW)")
    o = ours.t
    print(
        f"ours per step: generate {mean(o.generate_s):.3f} s, env + batch + advantages "
        f"{mean(o.rollout_s) - mean(o.generate_s):.3f} s, learner update {mean(o.update_s):.3f} s"
    )
    trl_s, ours_s = mean(trl_t.step_s), mean(o.step_s)
    median_ratio = statistics.median(trl_t.step_s[1:]) / statistics.median(o.step_s[1:])
    print(f"trl_s_per_step = {trl_s:.3f}, ours_s_per_step = {ours_s:.3f} (ratio of medians {median_ratio:.2f})")
    print(f"speedup = {trl_s / ours_s:.2f}")


if __name__ == "__main__":
    main()
