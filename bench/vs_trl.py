"""Seconds per GRPO step: TRL's ``GRPOTrainer`` vs our ``agent-rl train`` path, equal work, one run.

Both sides train the same tiny Qwen2 checkpoint on the same single-turn "What is a+b?" prompts
(``agent_rl/Arithmetic-v0``, difficulty 1, no tools, ChatML template): 8 prompts x 8 samples =
64 completions per step, exactly 32 new tokens each (end-of-sequence ignored), temperature 1.0,
no KL, lr 1e-4, one optimizer step per generation batch, CPU, fp32. Step 0 is a warm-up; the
``--steps`` after it are timed.

The two trainers run in one process, their steps interleaved (TRL step k, then our step k, from
a TRL callback), so a load change on a shared machine hits both sides alike. Each step is timed
on its own: TRL from ``on_step_begin`` to ``on_step_end``, ours around ``Trainer.step``.

Where a step's time goes, per side, by wrappers around each trainer's own methods (TRL is never
edited): generation (TRL ``_generate``; ours the backend's ``generate_sync``), old / reference
logprobs (TRL ``_get_per_token_logps_and_entropies`` under ``no_grad``; ours ``Learner.score``),
reward (TRL ``_calculate_rewards``; ours: inside the env step, part of "other"), update (forward,
backward and AdamW: TRL the step minus ``_generate_and_score_completions``; ours
``Learner.update``), weight sync (TRL: none without vLLM, its generation uses the training module;
ours ``Trainer.weight_sync``) and the rest. A table per phase with the ratio follows the totals.

Our side runs with the features in ``OURS_FAST`` (a user turns them on in the config; each has its
equality tests); ``--ours-defaults`` runs our defaults instead.

    python bench/vs_trl.py --threads N [--steps 6] [--model DIR] [--ours-defaults]

Prints a table and ``speedup = trl_s_per_step / ours_s_per_step``. Needs the ``bench`` extra (trl).
On a shared, loaded machine pass ``--threads 1``: two OpenMP threads on two busy cores stall at
every parallel region, and the wall times then measure the scheduler more than either trainer.

Without ``--threads`` (or with ``--cores N``) the comparison is of the same cores for each side, every
side in its own process and ours asynchronous: ``bench/vs_trl_cores.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
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
# our side's speed features (config overrides a user turns on), each with its equality tests:
# packed micro-batches with shared prompts (tests/learner/test_packing*.py), a group's prompt
# prefilled once and a KV cache written in place (tests/rollout/backends/test_hf_kv.py), the decode
# step computed from the weights with fused projections (tests/rollout/backends/test_hf_fused.py)
OURS_FAST = [
    "learner.packing=true",
    "learner.share_prefixes=true",
    "rollout.backend.preallocate_kv=true",
    "rollout.backend.share_prompts=true",
    "rollout.backend.fused_decode=true",
]
PHASES = ("generate", "old/ref logprobs", "reward", "update", "weight sync", "other")


@dataclass
class Timings:
    """Per step (index 0 = warm-up): wall and process-CPU seconds, and the two phases."""

    step_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    rollout_s: list[float] = field(default_factory=list)  # sampling + reward + advantages
    update_s: list[float] = field(default_factory=list)  # the rest: logprobs, loss, backward, optimizer
    generate_s: list[float] = field(default_factory=list)  # ours only: the backend's sampling
    reward_mean: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)  # per step: PHASES -> wall seconds
    cpu_phases: list[dict[str, float]] = field(default_factory=list)  # per step: PHASES -> process CPU seconds
    rollout_cpu_s: list[float] = field(default_factory=list)

    def begin(self) -> None:
        """Fresh phase records for the step that starts now."""
        self.phases.append(dict.fromkeys(PHASES, 0.0))
        self.cpu_phases.append(dict.fromkeys(PHASES, 0.0))

    def add(self, phase: str, wall: float, cpu: float) -> None:
        if self.phases:
            self.phases[-1][phase] += wall
            self.cpu_phases[-1][phase] += cpu


def timed(obj, name: str, add) -> None:
    """Replace ``obj.name`` by a wrapper that calls ``add(wall_s, cpu_s)`` after each call (process
    CPU: all threads; each side runs alone, so it is that side's)."""
    fn = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            add(time.perf_counter() - t0, time.process_time() - c0)

    if callable(fn) and not inspect.isroutine(
        fn
    ):  # an object called as a function (``WeightSync``): keep its other attributes
        setattr(obj, name, _TimedObject(fn, wrapper))
    else:
        setattr(obj, name, wrapper)


class _TimedObject:
    """``obj`` with its calls timed (a called object is looked up by type, so it cannot be patched in place)."""

    def __init__(self, obj, call):
        self._obj, self._call = obj, call

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._obj, name)


# -- prompts shared by both sides --------------------------------------------------------------
def step_prompts(step: int) -> list[tuple[list[dict], int]]:
    """(messages, answer) of the 8 prompts our trainer draws at ``step`` (same derived seeds)."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers agent_rl/Arithmetic-v0)
    from agent_rl.train.task_sampler import TaskSampler

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

    def __init__(self, model_dir: str, run_root: str, extra: list[str] = ()):
        from agent_rl.config import load_config
        from agent_rl.train.trainer import Trainer

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
            "tracking.loggers=[]",
            "tracking.progress=false",
            "tracking.save_trajectories=0",
            f"run.root={run_root}",
            *extra,
        ]
        self.trainer = Trainer(load_config(None, overrides), log=lambda *a, **k: None)
        self.t = Timings()

        def add(phase: str):
            return lambda wall, cpu: self.t.add(phase, wall, cpu)

        tr = self.trainer
        timed(tr.components.backend, "generate_sync", add("generate"))
        timed(tr.learner, "score", add("old/ref logprobs"))
        timed(tr.learner, "update", add("update"))
        timed(tr, "weight_sync", add("weight sync"))

    def step(self, step: int) -> None:
        self.t.begin()
        t0, c0 = time.perf_counter(), time.process_time()
        m = self.trainer.step(step)
        self.t.step_s.append(time.perf_counter() - t0)
        self.t.cpu_s.append(time.process_time() - c0)
        wall, cpu = self.t.phases[-1], self.t.cpu_phases[-1]
        self.t.update_s.append(wall["update"])
        self.t.rollout_s.append(self.t.step_s[-1] - self.t.update_s[-1])
        self.t.generate_s.append(m.get("time/generate_s", 0.0))
        wall["other"] = self.t.step_s[-1] - sum(v for k, v in wall.items() if k != "other")
        cpu["other"] = self.t.cpu_s[-1] - sum(v for k, v in cpu.items() if k != "other")
        self.t.reward_mean.append(m["rollout/reward_mean"])
        # equal work: 64 one-turn episodes; no turn exceeds 32 tokens, so 64 * 32 tokens in all
        # means every completion has exactly 32, and the learner trains on all of them
        assert m["rollout/episodes"] == COMPLETIONS and m["rollout/turns_mean"] == 1.0, m
        assert m["rollout/generated_tokens"] == COMPLETIONS * NEW_TOKENS, m
        assert m["train/tokens"] == COMPLETIONS * NEW_TOKENS, m

    def close(self) -> None:
        self.trainer.engine.close()
        self.trainer.components.backend.close()  # a vllm engine stops before the interpreter does


# -- TRL side ----------------------------------------------------------------------------------
def run_trl(model_dir: str, steps: int, out_dir: str, after_step) -> tuple[Timings, object]:
    """Train ``steps + 1`` GRPO steps with TRL; ``after_step(k)`` runs after step k, untimed.
    Returns the timings and the trainer (part 2 calls its update)."""
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
            t.begin()
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
        t0, c0 = time.perf_counter(), time.process_time()
        out = generate(inputs)
        t.rollout_s.append(time.perf_counter() - t0)
        t.rollout_cpu_s.append(time.process_time() - c0)
        lengths_N.append(out["completion_mask"].sum(1).tolist())
        return out

    def add(phase: str, only_no_grad: bool = False):
        def f(wall: float, cpu: float) -> None:
            if not (only_no_grad and torch.is_grad_enabled()):
                t.add(phase, wall, cpu)

        return f

    # the phases inside TRL's generate-and-score (wrappers on the instance; TRL's code is unchanged)
    timed(trainer, "_generate", add("generate"))
    timed(trainer, "_calculate_rewards", add("reward"))
    timed(trainer, "_get_per_token_logps_and_entropies", add("old/ref logprobs", only_no_grad=True))
    if hasattr(trainer, "_move_model_to_vllm"):  # TRL's weight sync (vLLM only; never called here)
        timed(trainer, "_move_model_to_vllm", add("weight sync"))
    trainer._generate_and_score_completions = timed_generate
    with contextlib.redirect_stdout(io.StringIO()):  # TRL prints a metrics dict at the end
        trainer.train()
    t.update_s = [s - r for s, r in zip(t.step_s, t.rollout_s, strict=True)]
    for ph, rollout_s, step_s in zip(t.phases, t.rollout_s, t.step_s, strict=True):
        ph["update"] = step_s - rollout_s  # forward + backward + AdamW: the step minus generate-and-score
        ph["other"] = rollout_s - ph["generate"] - ph["reward"] - ph["old/ref logprobs"] - ph["weight sync"]
    for ph, rollout_s, step_s in zip(t.cpu_phases, t.rollout_cpu_s, t.cpu_s, strict=True):
        ph["update"] = step_s - rollout_s
        ph["other"] = rollout_s - ph["generate"] - ph["reward"] - ph["old/ref logprobs"] - ph["weight sync"]
    # equal work: 64 completions per step, each exactly 32 tokens, all of them trained on
    assert len(t.step_s) == len(lengths_N) == steps + 1, (t.step_s, len(lengths_N))
    assert {len(x) for x in lengths_N} == {COMPLETIONS}, [len(x) for x in lengths_N]
    assert {n for x in lengths_N for n in x} == {NEW_TOKENS}, lengths_N
    return t, trainer


# -- driver ------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=6, help="timed steps after one warm-up step")
    p.add_argument("--model", default=None, help="tiny checkpoint dir (default: built into a temp dir)")
    p.add_argument(
        "--cores",
        type=int,
        default=None,
        help="the same N cores for each side, every side in its own process, ours asynchronous (default: all)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="instead of --cores: both sides in this process, interleaved, N torch threads each",
    )
    p.add_argument("--rounds", type=int, default=2, help="--cores: rounds of the sides, alternating order")
    p.add_argument("--worker-threads", type=int, default=1, help="--cores: torch threads of our rollout worker")
    p.add_argument(
        "--learner-threads",
        type=int,
        default=None,
        help="--cores: torch threads of our learner (default: the other cores)",
    )
    p.add_argument("--no-sync", dest="sync", action="store_false", help="--cores: skip our synchronous side")
    p.add_argument(
        "--turn-envs", default=None, help="--cores: the multi-turn part's envs, comma-separated (default: all three)"
    )
    p.add_argument("--ours-defaults", action="store_true", help="our side without OURS_FAST (our config defaults)")
    p.add_argument(
        "--turn-steps",
        type=int,
        default=None,
        help="multi-turn part: timed updates per env (0: skip; default 3, --cores 2)",
    )
    a = p.parse_args()
    if a.steps < 1 or a.rounds < 1:
        raise SystemExit("--steps and --rounds must be >= 1")
    if a.cores is not None and a.threads is not None:
        raise SystemExit("--cores and --threads are two comparisons: give one of them")
    if a.model is not None and not (Path(a.model) / "config.json").is_file():
        raise SystemExit(
            f"--model {a.model}: no model there (config.json); make one with `agent-rl init-model tiny --out DIR`"
        )
    a.omp_wait_policy = os.environ.get("OMP_WAIT_POLICY")  # the user's, before agent_rl sets its own
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    if a.threads is None:  # the same cores for each side, ours overlapping generation and training
        if a.ours_defaults:
            raise SystemExit("--ours-defaults applies to --threads N (the --cores comparison runs OURS_FAST)")
        from bench.vs_trl_cores import run

        a.turn_steps = 2 if a.turn_steps is None else a.turn_steps
        return run(a)
    a.turn_steps = 3 if a.turn_steps is None else a.turn_steps
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
    from agent_rl.run.progress import script_progress

    # on stderr: one unit per interleaved step pair (TRL's step k, then ours), and the multi-turn part
    progress = script_progress("bench/vs_trl", a.steps + 1 + (1 if a.turn_steps else 0), unit="part")
    with tempfile.TemporaryDirectory() as tmp:
        progress.phase("building the tiny model and both trainers")
        model_dir = a.model
        if model_dir is None:
            from agent_rl.run.envloader import init_tiny

            model_dir = str(init_tiny(Path(tmp) / "tiny"))
        extra = [] if a.ours_defaults else OURS_FAST
        print(f"our side's features: {' '.join(extra) or 'none (config defaults)'}")
        ours = Ours(model_dir, str(Path(tmp) / "runs"), extra)

        def step_pair(k: int) -> None:  # after TRL's step k (untimed for TRL), ours
            progress.phase(f"ours step {k}" + (" (warm-up)" if k == 0 else ""))
            ours.step(k)
            progress.advance({"ours s/step": ours.t.step_s[-1], "ours reward": ours.t.reward_mean[-1]})
            if k < a.steps:
                progress.phase(f"TRL step {k + 1}")

        progress.phase("TRL step 0 (warm-up)")
        trl_t, trl_trainer = run_trl(model_dir, a.steps, str(Path(tmp) / "trl"), after_step=step_pair)
        report(trl_t, ours.t, a.steps)
        if a.turn_steps:
            from bench.vs_trl_turns import compare

            progress.phase(f"multi-turn updates ({a.turn_steps} per env)")
            compare(trl_trainer, ours.trainer, a.turn_steps)
            progress.advance()
        ours.close()
    progress.finish(numbers={"steps per side": a.steps})


def report(trl_t: Timings, ours_t: Timings, steps: int) -> None:
    """Part 1's tables: totals per side, phases per side with the ratio, the speedup."""
    res = {"trl": trl_t, "ours": ours_t}
    assert len(ours_t.step_s) == steps + 1, ours_t.step_s

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
    o = ours_t
    print(
        f"ours per step: generate {mean(o.generate_s):.3f} s, env + batch + advantages "
        f"{mean(o.rollout_s) - mean(o.generate_s):.3f} s, learner update {mean(o.update_s):.3f} s"
    )
    print_phases(res)
    trl_s, ours_s = mean(trl_t.step_s), mean(o.step_s)
    median_ratio = statistics.median(trl_t.step_s[1:]) / statistics.median(o.step_s[1:])
    print(f"trl_s_per_step = {trl_s:.3f}, ours_s_per_step = {ours_s:.3f} (ratio of medians {median_ratio:.2f})")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    trl_cpu, ours_cpu = mean(trl_t.cpu_s), mean(o.cpu_s)
    print(
        f"cpu speedup = {trl_cpu / ours_cpu:.2f} (process CPU seconds per step; less sensitive to the machine's load)"
    )
    print(f"speedup = {trl_s / ours_s:.2f}")


def print_phases(res: dict[str, Timings]) -> None:
    """Mean wall and CPU seconds per timed step of each phase, per side, and TRL's over ours."""

    def means(rows: list[dict[str, float]]) -> dict[str, float]:
        m = {ph: statistics.mean(p[ph] for p in rows[1:]) for ph in PHASES}
        return {**m, "total": sum(m.values())}

    wall = {side: means(t.phases) for side, t in res.items()}
    cpu = {side: means(t.cpu_phases) for side, t in res.items()}

    def ratio(a: float, b: float) -> str:
        return f"{a / b:8.2f}" if b > 1e-4 else f"{'-':>8}"

    print(
        f"{'phase (s/step)':<18} {'trl wall':>8} {'ours':>7} {'trl/ours':>8}   {'trl cpu':>7} {'ours':>7} {'trl/ours':>8}"
    )
    for ph in (*PHASES, "total"):
        tw, ow, tc, oc = wall["trl"][ph], wall["ours"][ph], cpu["trl"][ph], cpu["ours"][ph]
        print(f"{ph:<18} {tw:>8.3f} {ow:>7.3f} {ratio(tw, ow)}   {tc:>7.3f} {oc:>7.3f} {ratio(tc, oc)}")
    print(" (generate: sampling; old/ref logprobs: scoring without gradient; reward: TRL's reward functions, ours")
    print("  are computed by the env inside the rollout and count under other; update: forward + backward + AdamW;")
    print("  weight sync: TRL has none without vLLM, ours moves only the version when colocated; other: env,")
    print("  tokenization, batching, advantages)")


if __name__ == "__main__":
    main()
