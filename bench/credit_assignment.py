"""Credit assignment on long episodes: GRPO vs SPO, GiGPO, G2PO, CBPO, turn-level GAE, ARPO and VinePPO at
equal sampled-token budgets.

Every method trains the same SFT'd tiny model on one ``--setting`` until it has sampled
``--budget-tokens`` new policy tokens (a branch's copied prefix is not counted: it was sampled
once, by its parent; VinePPO's value continuations are counted):

- ``maze`` (the default, the measured one): ``agent_rl/Maze-v0`` (configs/maze.yaml: one move per
  turn, shortest paths of 8-12 moves, 14 turns, here with sparse walls: ``MAZE`` below);
- ``twx_coin_long``: TextWorld-Express CoinCollector (configs/twx_coin.yaml) with 10 rooms behind
  doors and 20 turns (``TWX_COIN_LONG`` below; the pilot); needs Java and ``textworld-express``;
- ``twx_coin_rooms``: CoinCollector with 11 rooms behind doors, each room in one line
  (``view=exits``), 30 turns, SFT on the explorer teacher (``TWX_COIN_ROOMS`` below);
- ``hanoi``: TextArena TowerOfHanoi with 4 disks (15 moves at best), 30 turns, SFT on the noisy
  recursive solver (``HANOI`` below); pure Python;
- ``hanoi_sparse``: the same with reward 1 solved, 0 otherwise (no partial credit), from hanoi's model;
- ``hanoi_tight``: the sparse game with 16 turns (only the shortest path, with at most one invalid move,
  solves it), from hanoi's model.

``grpo_g32`` is GRPO with the step's 32 episodes in one group instead of 4 groups of 8 (for a game with
one start position, where every task is the same problem). ``gigpo_no_penalty`` is GiGPO with its
invalid-action penalty at 0 (the penalty, 0.1, is GiGPO's only signal in a group where every episode failed).
``dr_grpo`` is GRPO's group-mean baseline without the division by the group's std, as G2PO's default
(``mode: mean_norm``) has it: it tells G2PO's normalization from its graph.

Held-out success (the share of test episodes solved, reward 1; the same tasks for every run, sampled
at the rollout temperature; the mean reward beside it as ``eval/reward``, which differs where a game
gives partial credit) is measured at 0 tokens and every ``--eval-every-tokens``. Runs are interleaved
(seed-major) so that machine load hits every method alike. Output, all under ``--out``:

- ``runs/METHOD-sSEED/``: each run's directory, ``config.yaml`` and ``metrics.jsonl`` (one row per
  step; ``rollout/generated_tokens`` counts the sampled tokens only, a branch's copied prefix is in
  ``rollout/copied_prefix_tokens``; ``eval/success`` at step 0 and at every evaluation; the
  ``credit/`` diagnostics of every step, docs/learner.md), the format ``agent-rl compare`` reads; no
  checkpoint is written;
- ``success_vs_tokens.png`` and ``table.md``, drawn by ``agent_rl.commands.compare`` from those run
  directories (each method's seeds one group, aligned by sampled tokens), the table followed by
  each method's final held-out success with a 95% t interval over seeds, the area under success
  against sampled tokens, the turns of the successful held-out episodes, the wall time of a run,
  the mean of each ``credit/`` diagnostic over the training steps, GRPO's late slope, each
  method's gap to GRPO, and the share of GRPO's sampled tokens that fell in groups without signal
  with an estimate of what giving them signal is worth (``empty_group_headroom``);
- ``results.jsonl``: one line per evaluation.

    OMP_NUM_THREADS=1 python bench/credit_assignment.py --model SFT_DIR --jobs 2 --seeds 0 1 2 \
        --budget-tokens 36000 --eval-every-tokens 6000 --eval-episodes 64

(the measured run, five methods: 108 min on an idle 2-core machine; result in
bench/results/credit_assignment/). ``--max-steps N`` also stops each run after N steps (the CI
smoke test: ``tests/test_credit_bench.py``).

Progress: one line per training step (piped) or a live bar: tokens sampled over all runs / the
total budget, the run (``run 3/15 gigpo seed 0``), its step, reward and last held-out success, ETA.

Without ``--model`` a tiny model is built and SFT'd on the setting's scripted teacher first
(minutes). ``--jobs N`` runs N (method, seed) runs at once, each in its own process (``--device
cuda``: all on one GPU); every run writes its own ``results-METHOD-sSEED.jsonl`` and the table is
drawn from all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_rl.run.progress import TaskProgress, script_progress  # noqa: E402 (after the path of a checkout)

# method -> overrides of the setting's config. Batches are sized to sample about the same number of
# tokens per step: 32 episodes (GRPO/GiGPO/G2PO/turn-GAE: 4 prompts x 8; CBPO and ARPO: 4 prompts x
# (4 parents + 4 branch/fresh slots); SPO: 32 prompts x 1, single stream); VinePPO: 4 prompts x 2
# main episodes, each forked 2 times at the start of each of its first 4 turns (up to 64 value
# continuations: its steps sample more tokens, so it gets fewer of them within the same budget).
METHODS: dict[str, list[str]] = {
    "grpo": ["algorithm.advantage.name=grpo"],
    "gigpo": ["algorithm.credit.name=gigpo"],
    "g2po": ["algorithm.credit.name=g2po"],
    "cbpo": [
        "algorithm.credit.name=cbpo", "algorithm.credit.total_rollouts=8", "rollout.group_size=4",
        "algorithm.credit.d_min=4", "algorithm.credit.window=4", "rollout.topk=10",
    ],
    "spo": ["algorithm.credit.name=spo", "rollout.group_size=1", "trainer.prompts_per_step=32"],
    "turn_gae": ["algorithm.credit.name=turn_gae"],
    "arpo": ["algorithm.credit.name=arpo", "algorithm.credit.total_rollouts=8", "rollout.group_size=4", "rollout.topk=10"],
    "vineppo": [
        "algorithm.credit.name=vineppo", "rollout.group_size=2", "algorithm.credit.mc_rollouts=2",
        "algorithm.credit.max_points=4",
    ],
    # GRPO with the step's 32 episodes in one group (1 prompt x 32): on a game with one start position
    # (hanoi) every task is the same game, so 4 groups of 8 split episodes of one problem; one group of 32
    # leaves fewer groups whose rewards are all equal
    "grpo_g32": ["algorithm.advantage.name=grpo", "trainer.prompts_per_step=1", "rollout.group_size=32"],
    # GRPO's baseline without its std division (Dr. GRPO; G2PO's episode term, mode mean_norm, has none either):
    # separates G2PO's normalization from its graph credit
    "dr_grpo": ["algorithm.advantage.name=dr_grpo"],
    # GiGPO without its invalid-action penalty (0.1 by default): in a group where every episode failed,
    # the penalty is the only reward its step returns see, so this separates the anchor-state credit from it
    "gigpo_no_penalty": ["algorithm.credit.name=gigpo", "algorithm.credit.invalid_action_penalty=0"],
}  # fmt: skip


@dataclass(frozen=True)
class Setting:
    """One environment of the comparison: its config, the env overrides of every run and of SFT."""

    config: str  # under configs/
    env_id: str  # whose text init-model's tokenizer also learns
    env: list[str]  # overrides of every run (and of SFT, before ``sft``)
    sft: list[str]  # overrides of the SFT that builds the starting model
    lr: float  # learner.lr of every run unless --lr
    sft_steps: int  # SFT steps of the starting model unless --sft-steps
    init_model: list[str] = field(default_factory=list)  # extra init-model flags


# the maze of every run: 8-12-move shortest paths (difficulty 3), 14 turns, sparse walls (0.1) so that
# following the hint line mostly works and a policy's errors are its own detours (measured with
# scripted policies on 100 test mazes: BFS 1.00, toward-G among the open moves 0.80, the same with 25%
# random moves 0.60)
MAZE = ["env.options.difficulty=3", "env.options.wall_density=0.1", "env.options.hint_style=toward"]
# SFT sees shorter mazes too (difficulty 1-3), at lr 1e-3: at 3e-3 (the arithmetic quickstart's) the tiny model
# stays at the move marginals (measured: loss 0.69-0.71 for 900 steps, the same move probabilities for
# every board); at 1e-3 it left them by step 200 (loss 0.56) and after 800 steps (batch 8) solved
# 0.469 [0.344, 0.594] of 64 difficulty-3 test mazes
SFT = ["env.options.difficulty=[1,2,3]", "env.options.wall_density=0.1", "env.options.hint_style=toward",
       "sft.lr=1.0e-3", "sft.batch_size=8", "sft.patience=10", "sft.eval_every_steps=200"]  # fmt: skip
# TextWorld-Express CoinCollector with 10 rooms behind doors (no distractors): the coin is out of
# sight, so the agent opens doors and walks (the upstream gold path, a random walk, takes 16.6
# commands on average over 20 test games, 2-33); 20 turns, observations cut to 16 words before the
# valid actions (which name the doors and moves)
TWX_COIN_LONG = [
    "env.options.game_params=numLocations=10,numDistractorItems=0,includeDoors=1", "env.options.max_turns=20",
    "rollout.max_turns=20", "env.options.max_observation_tokens=16", "rollout.max_total_tokens=3072",
]  # fmt: skip
# TextWorld-Express CoinCollector with 11 rooms behind doors (the upstream's most), each room shown in one
# line (``view=exits``: its name, the coin, the exits); 30 turns. The teacher explores from what it sees
# (``noisy_explorer``: no gold path). Measured with ``agent-rl eval`` of the scripted policies on 60 test
# games (bench/results/credit_twx_rooms/README.md): the explorer succeeds on all, in 12.5 turns on average
# (57% of them take more than 10); the noisy explorer 0.883 in 14.7 turns; a random valid action (the
# valid actions shown) 0.167. The model sees no valid actions: the exits say what can be done
TWX_COIN_ROOMS = [
    "env.options.game_params=numLocations=11,numDistractorItems=0,includeDoors=1", "env.options.view=exits",
    "env.options.valid_actions=false", "env.options.max_turns=30", "rollout.max_turns=30",
    "env.options.max_observation_tokens=64",
    "rollout.max_total_tokens=3072",
]  # fmt: skip
TWX_SFT = ["sft.demos=300", "sft.batch_size=8", "sft.lr=1.0e-3", "sft.eval_every_steps=50", "sft.eval_episodes=32",
           "sft.patience=5"]  # fmt: skip

# TextArena's TowerOfHanoi-v0-medium: 4 disks from A to C, 15 moves at best, one start position (every task
# is the same game; the policy's own samples make the episodes differ). 30 turns, the upstream's own limit:
# a game it ends, or a second invalid move in a row, gets the upstream's partial credit (the share of the
# disks on C), a solved one 1; success is solved. The teacher is the recursive solver with 20% random
# legal moves (``noisy_solver``), which recovers from any position; every turn shows the legal moves
HANOI = ["env.options.game=TowerOfHanoi-v0-medium", "env.options.max_turns=30", "rollout.max_turns=30",
         "rollout.max_total_tokens=3072"]  # fmt: skip
HANOI_SPARSE = [*HANOI, "env.options.reward=success"]  # reward 1 solved, 0 otherwise (no partial credit)
HANOI_SFT = ["sft.demos=300", "sft.batch_size=8", "sft.lr=1.0e-3", "sft.eval_every_steps=100", "sft.eval_episodes=32",
             "sft.patience=5"]  # fmt: skip

SETTINGS: dict[str, Setting] = {
    "maze": Setting("maze.yaml", "agent_rl/Maze-v0", MAZE, SFT, lr=1e-3, sft_steps=800),
    # lr 2e-4: configs/twx_coin.yaml's (at 1e-3 five GRPO steps collapsed its SFT model, docs/text-games.md)
    "twx_coin_long": Setting(
        "twx_coin.yaml", "agent_rl/TextWorldExpress-v0", TWX_COIN_LONG, TWX_SFT, lr=2e-4, sft_steps=100,
        init_model=["--max-position-embeddings", "4096"],
    ),
    "twx_coin_rooms": Setting(
        "twx_coin.yaml", "agent_rl/TextWorldExpress-v0", TWX_COIN_ROOMS,
        [*TWX_SFT, "sft.teacher=envs.textworld_express.policies:noisy_explorer"], lr=2e-4, sft_steps=300,
        init_model=["--max-position-embeddings", "4096"],
    ),
    # lr 2e-4: at 1e-3 (the FrozenLake recipe's) GRPO and GiGPO both fell from 0.72 to 0.16 and 0.09 held-out
    # success within 2 steps, 0.00 and 0.03 after 4 (bench/results/credit_hanoi_pilot/)
    "hanoi": Setting(
        "textarena_frozenlake.yaml", "agent_rl/TextArena-v0", HANOI, HANOI_SFT, lr=2e-4, sft_steps=300,
        init_model=["--max-position-embeddings", "4096"],
    ),
    # the same game with a sparse reward, 1 solved and 0 otherwise (the upstream's partial credit left 6% of
    # GRPO's groups with equal rewards in the pilot); its SFT model is hanoi's (SFT reads no reward)
    "hanoi_sparse": Setting(
        "textarena_frozenlake.yaml", "agent_rl/TextArena-v0", HANOI_SPARSE, HANOI_SFT,
        lr=2e-4, sft_steps=300, init_model=["--max-position-embeddings", "4096"],
    ),
    # the sparse game with 16 turns: solved only on the shortest path (15 moves) with at most one invalid
    # move. The turn limit is this family's horizon knob: a model of hanoi's SFT recipe (200 steps;
    # bench/results/credit_hanoi_tight) solved 0.72, 0.44, 0.34 and 0.22 of 32 test games at 30, 20, 17 and
    # 16 turns. Its runs start from a hanoi model (--model): built here, SFT would see demonstrations cut at 16 turns
    "hanoi_tight": Setting(
        "textarena_frozenlake.yaml", "agent_rl/TextArena-v0",
        [*HANOI_SPARSE, "env.options.max_turns=16", "rollout.max_turns=16"], HANOI_SFT,
        lr=2e-4, sft_steps=300, init_model=["--max-position-embeddings", "4096"],
    ),
}  # fmt: skip

COMMON = [
    "sandbox.backend=process",
    "trainer.prompts_per_step=4",
    "trainer.task_pool=128",  # a fixed pool of training tasks, revisited (SPO's tracker needs revisits)
    "trainer.eval_every=0",
    "tracking.loggers=[]",
    "tracking.progress=false",
    "tracking.save_trajectories=0",
]


def build_model(out: Path, device: str, sft_steps: int | None, setting: Setting) -> Path:
    """init-model + SFT on the setting's scripted teacher (the starting point of every run)."""
    cli = [sys.executable, "-m", "agent_rl.cli"]
    if not (out / "tiny").exists():
        subprocess.run(
            [*cli, "init-model", "tiny", "--out", str(out / "tiny"), "--env", setting.env_id, *setting.init_model],
            check=True,
        )
    subprocess.run(
        [*cli, "sft", str(ROOT / "configs" / setting.config), f"model.path={out / 'tiny'}", "sandbox.backend=process",
         f"model.device={device}", *setting.env, *setting.sft, f"sft.max_steps={sft_steps or setting.sft_steps}",
         f"sft.out={out / 'sft_model'}", f"run.root={out}", "tracking.progress=false"],
        check=True,
    )  # fmt: skip
    return out / "sft_model"


def copied_prefix_tokens(trajectories) -> int:
    """Policy tokens that forked trajectories copied from their parents (not sampled again)."""
    return sum(sum(t.loss_mask_T[: t.branch_point]) for t in trajectories if t.parent_id is not None)


def initial_point(args: argparse.Namespace, out: Path, measure) -> dict:
    """The starting model's evaluation, the same for every method and seed (the same test tasks and
    per-request seeds; measured alike for all 15 runs): read from ``initial.json`` when an earlier
    run measured it with the same model and episodes, else measured and written there."""
    path = out / "initial.json"
    # "success": what the row's success means (a file from before it was the share solved is measured again)
    # overrides: the command line's own (a different turn limit or reward is a different evaluation)
    key = {"model": str(Path(args.model).resolve()), "episodes": args.eval_episodes, "setting": args.setting,
           "success": "pass@1", **({"overrides": args.overrides} if args.overrides else {})}  # fmt: skip
    if path.exists():
        saved = json.loads(path.read_text())
        if saved["key"] == key:
            return saved["row"]
    row = measure()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, "row": row}))
    tmp.replace(path)
    return row


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / "runs" / f"{method}-s{seed}"


def run_config(method: str, seed: int, args: argparse.Namespace, out: Path):
    """The config of one run: the setting's config with the bench's overrides (the command line's own last: they win)."""
    from agent_rl.config import load_config

    setting = SETTINGS[args.setting]
    overrides = [
        f"model.path={args.model}",
        f"model.device={args.device}",
        f"run.dir={run_dir(out, method, seed)}",
        *setting.env,
        *COMMON,
        *METHODS[method],
        f"trainer.seed={seed}",
        f"learner.lr={args.lr if args.lr is not None else setting.lr}",
        *args.overrides,
    ]
    return load_config(ROOT / "configs" / setting.config, overrides)


def run_dirs_from_results(rows: list[dict], out: Path, args: argparse.Namespace) -> None:
    """Run directories for the results of a bench version that kept none (the measured 36k-token run
    in bench/results/credit_assignment/): each run's evaluation rows as ``metrics.jsonl``
    (``eval/success``; ``rollout/generated_tokens`` the tokens sampled since the previous
    evaluation, so that their running sum is the measured count; ``rollout/reward_mean_since_eval``
    the mean training reward of the steps in between) and a ``config.yaml`` resolved today from the
    bench's overrides (``--model`` as given; the runs' own files were not kept)."""
    curves: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        curves.setdefault((r["method"], r["seed"]), []).append(r)
    for (method, seed), curve in curves.items():
        path = run_dir(out, method, seed)
        if (path / "metrics.jsonl").exists():
            continue
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.yaml").write_text(run_config(method, seed, args, out).to_yaml())
        lines, before = [], 0
        for r in sorted(curve, key=lambda r: r["tokens"]):
            row = {"step": r["step"], "eval/success": r["success"], "rollout/generated_tokens": r["tokens"] - before}
            if r.get("train_reward") is not None:
                row["rollout/reward_mean_since_eval"] = r["train_reward"]
            lines.append(json.dumps(row) + "\n")
            before = r["tokens"]
        (path / "metrics.jsonl").write_text("".join(lines))


def turns_to_success(trajectories) -> float | None:
    """Mean number of turns of the successful episodes (reward 1), None when none succeeded."""
    turns = [len(t.turns_N) for t in trajectories if t.reward is not None and t.reward >= 1.0 - 1e-9]
    return sum(turns) / len(turns) if turns else None


def run_one(method: str, seed: int, args: argparse.Namespace, out: Path, report=None) -> list[dict]:
    """Train one (method, seed) to the token budget (or ``--max-steps``); each evaluation row is appended to
    ``results-METHOD-sSEED.jsonl`` as it is measured (a run stopped early keeps its curve so far),
    each step's metrics to the run directory's ``metrics.jsonl``. ``report(tokens, numbers)``: after
    every step and evaluation (the progress)."""
    path = out / f"results-{method}-s{seed}.jsonl"
    path.write_text("")
    (run_dir(out, method, seed) / "metrics.jsonl").unlink(missing_ok=True)  # a rerun starts its curve afresh
    report = report or (lambda tokens, numbers: None)

    def keep(row: dict) -> dict:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    import asyncio

    from agent_rl.train.evaluation import evaluate
    from agent_rl.train.trainer import Trainer

    trainer = Trainer(run_config(method, seed, args, out), log=lambda *a: None)
    copied: list[int] = []
    grow = trainer._grow_branches

    def counting_grow(step: int, groups):  # the budget counts sampled tokens: not what branches copied
        grown = grow(step, groups)
        copied.append(copied_prefix_tokens([t for ts in grown.values() for t in ts]))
        return grown

    trainer._grow_branches = counting_grow

    def evaluation(tokens: int, step: int, t0: float, train_reward: float | None) -> dict:
        result, episodes = asyncio.run(evaluate(trainer.engine, args.eval_episodes, 1, split="test", seed=20_000))
        # success: the share of episodes solved (reward 1; pass@1). ``result.success`` is the mean reward,
        # which on a game with partial credit (TowerOfHanoi) is not the share solved; it is kept as ``reward``
        row = {"method": method, "seed": seed, "tokens": tokens, "step": step, "success": result.pass_at_k,
               "reward": result.success, "turns_success": turns_to_success(episodes), "train_reward": train_reward,
               "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
        return row

    t0 = time.perf_counter()
    report(0, {"phase": "evaluation at 0 tokens"})
    # every run starts from the same model and evaluates the same tasks with per-request seeds: the
    # 0-token point is measured once and shared (across --jobs processes through a file)
    rows = [keep({**initial_point(args, out, lambda: evaluation(0, 0, t0, None)), "method": method, "seed": seed})]
    trainer.tracker.log(
        0, {"eval/success": rows[0]["success"], "eval/reward": rows[0]["reward"], "rollout/generated_tokens": 0}
    )
    tokens, step, next_eval, rewards = 0, 0, args.eval_every_tokens, []
    while tokens < args.budget_tokens and (args.max_steps is None or step < args.max_steps):
        copied.clear()
        metrics = trainer.step(step)
        step += 1
        sampled = int(metrics["rollout/generated_tokens"]) - sum(copied)
        tokens += sampled
        rewards.append(metrics["rollout/reward_mean"])
        metrics.update({"rollout/generated_tokens": sampled, "rollout/copied_prefix_tokens": sum(copied)})
        last = tokens >= args.budget_tokens or step == args.max_steps
        if tokens >= next_eval or last:
            report(tokens, {"step": step, "reward": metrics["rollout/reward_mean"], "phase": "evaluation"})
            rows.append(keep(evaluation(tokens, step, t0, sum(rewards) / len(rewards))))
            metrics["eval/success"], metrics["eval/reward"] = rows[-1]["success"], rows[-1]["reward"]
            rewards.clear()
            while next_eval <= tokens:  # one evaluation per interval, even when a step crosses two
                next_eval += args.eval_every_tokens
        trainer.tracker.log(step, metrics)
        report(tokens, {"step": step, "reward": metrics["rollout/reward_mean"], "success": rows[-1]["success"]})
    trainer.tracker.close(final=False)
    trainer.rollouts.close()
    trainer.engine.close()
    return rows


def flatness_and_gaps(curves: dict[tuple[str, int], list[dict]], methods: list[str]) -> list[str]:
    """Has GRPO's curve flattened (slope of its seeds' evaluations over the last two thirds of the budget,
    per 10k tokens, by least squares), and each method's gap to GRPO, over each run's last 3 evaluations
    and over all its evaluations after 0, with the standard error of each difference
    across seeds (the seeds are independent runs)."""
    import numpy as np

    def per_seed(m: str, part: slice) -> np.ndarray:
        return np.array([np.mean([r["success"] for r in c[part]]) for k, c in sorted(curves.items()) if k[0] == m])

    out = []
    if "grpo" not in methods:
        return out
    # every GRPO seed's evaluations in one fit (seeds may have evaluated at different steps)
    points = np.array([(r["tokens"], r["success"]) for k, c in curves.items() if k[0] == "grpo" for r in c])
    xs, ys = points[:, 0], points[:, 1]
    late = xs >= xs.max() / 3
    if late.sum() >= 4:  # the fit's standard error needs two residual degrees of freedom
        (slope, _), cov = np.polyfit(xs[late] / 10_000, ys[late], 1, cov=True)
        out.append(
            f"GRPO's slope over the last two thirds of the budget ({late.sum()} evaluations of all seeds, "
            f"{xs[late].min():.0f}-{xs.max():.0f} tokens): {slope:+.3f} ± {np.sqrt(cov[0, 0]):.3f} "
            "(standard error) success per 10k tokens"
        )
    for name, part in (("the last 3 evaluations", slice(-3, None)), ("all evaluations after 0", slice(1, None))):
        base = per_seed("grpo", part)
        for m in methods:
            if m == "grpo":
                continue
            t = per_seed(m, part)
            gap = t.mean() - base.mean()
            se = (
                np.sqrt(t.var(ddof=1) / len(t) + base.var(ddof=1) / len(base))
                if min(len(t), len(base)) > 1
                else float("nan")
            )
            out.append(f"{m} - grpo over {name}: {gap:+.3f} (standard error {se:.3f}, {len(t)} vs {len(base)} seeds)")
    return out


# two-sided 95% quantile of Student's t for 1..10 degrees of freedom (beyond: 1.96)
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]


def mean_ci(values: list[float]) -> str:
    """``mean [lo, hi]``: a t interval over the seeds (one seed: the mean alone)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return f"{mean:.3f}"
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * sd / n**0.5
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def area(curve: list[dict]) -> float:
    """Area under success against sampled tokens (trapezoids), divided by the tokens: the curve's mean height."""
    if len(curve) < 2 or curve[-1]["tokens"] <= 0:
        return curve[-1]["success"]
    total = sum(
        (b["tokens"] - a["tokens"]) * (a["success"] + b["success"]) / 2 for a, b in zip(curve, curve[1:], strict=False)
    )
    return total / curve[-1]["tokens"]


def results_table(curves: dict[tuple[str, int], list[dict]], methods: list[str]) -> list[str]:
    """Per method over its seeds: final held-out success (95% t interval), area under success vs tokens,
    turns of the successful held-out episodes at the last evaluation, wall time of a run."""
    lines = [
        "| method | seeds | final success [95% CI] | area under success vs tokens [95% CI] | turns to success | "
        "wall time per run (s) |",
        "|---|---|---|---|---|---|",
    ]
    for m in methods:
        runs = [c for k, c in sorted(curves.items()) if k[0] == m]
        turns = [c[-1]["turns_success"] for c in runs if c[-1].get("turns_success") is not None]
        seconds = [c[-1]["seconds"] for c in runs if c[-1].get("seconds") is not None]
        lines.append(
            f"| {m} | {len(runs)} | {mean_ci([c[-1]['success'] for c in runs])} | {mean_ci([area(c) for c in runs])} "
            f"| {f'{sum(turns) / len(turns):.1f}' if turns else '-'} "
            f"| {f'{sum(seconds) / len(seconds):.0f}' if seconds else '-'} |"
        )
    return lines


def diagnostics_table(out: Path, runs: list[tuple[str, int]], methods: list[str]) -> list[str]:
    """Each ``credit/`` metric's mean over all training steps of a method's runs (``-``: not logged)."""
    from agent_rl.run.tracking import read_metrics

    sums: dict[tuple[str, str], list[float]] = {}
    for m, s in runs:
        for row in read_metrics(run_dir(out, m, s)):
            for k, v in row.items():
                if k.startswith("credit/") and isinstance(v, int | float):
                    sums.setdefault((k, m), []).append(float(v))
    keys = sorted({k for k, _ in sums}, key=lambda k: (not k.startswith("credit/adv_var"), k))
    if not keys:
        return []
    lines = ["| diagnostic (mean over steps) | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for k in keys:
        cells = [f"{sum(v) / len(v):.4g}" if (v := sums.get((k, m))) else "-" for m in methods]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return lines


def empty_group_headroom(out: Path, curves: dict[tuple[str, int], list[dict]]) -> list[str]:
    """How much of GRPO's sampling fell in groups without signal, and what giving it signal could be
    worth: each step's ``credit/zero_adv_frac`` (groups whose rewards were all equal) times its
    sampled tokens, summed over the steps within the run's curve; then those tokens times GRPO's
    mean rate (final minus initial success over the tokens, per seed). The second number is an
    estimate under one assumption, written out in the line: that a token in such a group would
    have taught as much as a token in a group with signal. A method whose only gain over GRPO is
    signal in those groups (GiGPO's penalty, SPO's tracker, one larger group) wins about that much at
    most, under that assumption."""
    from agent_rl.run.tracking import read_metrics

    empty, total, rates = [], [], []
    for (m, s), c in sorted(curves.items()):
        if m != "grpo" or c[-1]["tokens"] <= 0:
            continue
        steps = [r for r in read_metrics(run_dir(out, m, s)) if "credit/zero_adv_frac" in r]
        if not steps:  # a run directory rebuilt from evaluations alone (the maze comparison's)
            continue
        seen = lost = 0.0
        for row in steps:
            seen += row.get("rollout/generated_tokens", 0.0)
            if seen <= c[-1]["tokens"]:
                lost += row["credit/zero_adv_frac"] * row.get("rollout/generated_tokens", 0.0)
        empty.append(lost)
        total.append(c[-1]["tokens"])
        rates.append((c[-1]["success"] - c[0]["success"]) / c[-1]["tokens"])
    if not empty:
        return []
    n = len(empty)
    lost, tokens, rate = sum(empty) / n, sum(total) / n, sum(rates) / n
    share = (
        f"GRPO's groups with equal rewards (no signal) held {lost / tokens:.0%} of its sampled tokens "
        f"({lost:.0f} of {tokens:.0f} a run, {n} seeds)"
    )
    if rate <= 0:
        return [f"{share}; GRPO's success did not rise ({rate * 10_000:+.3f} per 10k tokens), so no estimate"]
    return [
        f"{share}; at GRPO's mean rate ({rate * 10_000:+.3f} success per 10k tokens), giving them signal "
        f"is worth about {lost * rate:+.3f} success, if a token there would teach as much as one in a group "
        "with signal"
    ]


def common_reach(curves: dict[tuple[str, int], list[dict]]) -> dict[tuple[str, int], list[dict]]:
    """Every curve up to the tokens all runs reached: its evaluations before the shortest run's last
    one, and its first at or beyond it. Runs that all sampled their budget keep every evaluation,
    however many each had (steps of different sizes cross ``--eval-every-tokens`` at different
    steps); a run cut short by a time limit cuts the others at the same point of the budget."""
    curves = {k: sorted(c, key=lambda r: r["tokens"]) for k, c in curves.items()}
    reach = min(c[-1]["tokens"] for c in curves.values())
    return {
        k: [r for r in c if r["tokens"] < reach] + [next(r for r in c if r["tokens"] >= reach)]
        for k, c in curves.items()
    }


def summarize(rows: list[dict], out: Path) -> str:
    """``agent_rl.commands.compare``'s plot and table of held-out success against sampled tokens over the run
    directories (each method's seeds one group), then per method the final success with its 95%
    interval over seeds, the area under the curve, turns to success and wall time, the mean of each
    ``credit/`` diagnostic over the training steps, GRPO's late slope, its tokens in groups without
    signal (``empty_group_headroom``) and the gaps to GRPO over
    the tokens every run reached (``common_reach``: a run cut short by a time limit cuts the others
    at the same point, so every method gets the same token budget)."""
    from agent_rl.commands.compare import compare

    curves: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        curves.setdefault((r["method"], r["seed"]), []).append(r)
    curves = common_reach(curves)
    methods = [m for m in METHODS if any(k[0] == m for k in curves)]
    runs = [k for m in methods for k in sorted(curves) if k[0] == m]
    _, report = compare(
        [str(run_dir(out, m, s)) for m, s in runs],
        ("eval/success",),
        x="tokens",
        out=out / "success_vs_tokens.png",
        labels=[m for m, _ in runs],
    )
    parts = [report, "", *results_table(curves, methods)]
    diagnostics = diagnostics_table(out, runs, methods)
    if diagnostics:
        parts += ["", *diagnostics]
    table = "\n".join([*parts, "", *flatness_and_gaps(curves, methods), *empty_group_headroom(out, curves)])
    (out / "table.md").write_text(table + "\n")
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--setting", default="maze", choices=list(SETTINGS), help="the environment (default: maze, the measured one)"
    )
    p.add_argument("--model", type=Path, default=None, help="the setting's SFT'd model (default: build one)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget-tokens", type=int, default=20_000, help="sampled policy tokens per run")
    p.add_argument("--eval-every-tokens", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--lr", type=float, default=None, help="learner.lr (default: the setting's, maze 1e-3)")
    p.add_argument(
        "--max-steps", type=int, default=None, help="stop each run after this many steps, even under the token budget"
    )
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "credit_bench")
    p.add_argument(
        "--summarize-only",
        action="store_true",
        help="redraw the plot and table from the run directories (made from results.jsonl when an older bench kept none)",
    )
    p.add_argument(
        "--device", default="cpu", help="model.device of every run (cuda: the hf backend and learner on a GPU)"
    )
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process (1: in this process)")
    p.add_argument(
        "--sft-steps", type=int, default=None, help="SFT steps when --model is not given (default: the setting's)"
    )
    p.add_argument("--one", nargs=2, metavar=("METHOD", "SEED"), help=argparse.SUPPRESS)
    p.add_argument(
        "overrides", nargs="*", help="config overrides of every run, after the bench's own (e.g. rollout.max_turns=8)"
    )
    args = p.parse_args()
    if args.model is not None and not args.model.is_dir():
        p.error(f"--model {args.model}: no such model directory")
    if args.max_steps is not None and args.max_steps < 1:
        p.error(f"--max-steps must be >= 1, got {args.max_steps}")
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    if args.one:  # a child of run_parallel: its own progress, into its log
        method, seed = args.one[0], int(args.one[1])
        progress = script_progress(f"bench/credit_assignment {method} seed {seed}", args.budget_tokens, unit="tokens")
        run_one(method, seed, args, args.out, lambda tokens, numbers: report(progress, tokens, numbers))
        progress.finish([run_dir(args.out, method, seed) / "metrics.jsonl"])
        return
    progress = None
    if not args.summarize_only:
        if args.model is None:
            args.model = build_model(args.out, args.device, args.sft_steps, SETTINGS[args.setting])
        runs = [(m, s) for s in args.seeds for m in args.methods]  # seed-major: every method sees the same load
        progress = script_progress("bench/credit_assignment", len(runs) * args.budget_tokens, unit="tokens")
        if args.jobs == 1:
            for i, (method, seed) in enumerate(runs):
                name, done = f"run {i + 1}/{len(runs)} {method} seed {seed}", i * args.budget_tokens
                progress.phase(name)
                run_one(
                    method,
                    seed,
                    args,
                    args.out,
                    lambda t, numbers, n=name, d=done: report(progress, d + min(t, args.budget_tokens), numbers, n),
                )
        else:
            run_parallel(runs, args, progress)
    files = sorted(args.out.glob("results-*.jsonl")) or [results]  # per run; or only the merged file of an older run
    rows = [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines() if line.strip()]
    if not rows:
        p.error(f"--out {args.out}: no results-*.jsonl or results.jsonl to summarize")
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.summarize_only:
        args.model = args.model or "SFT_DIR"
        run_dirs_from_results(rows, args.out, args)
    print(summarize(rows, args.out))
    files = [args.out / "table.md", args.out / "success_vs_tokens.png", results, args.out / "runs"]
    if progress is not None:
        progress.finish(files)
    else:
        print(f"written: {', '.join(str(f) for f in files if f.exists())}")


def report(progress: TaskProgress, tokens: int, numbers: dict, run: str = "") -> None:
    """A run's progress: its phase when it changes (evaluation), else its tokens so far and numbers."""
    phase = numbers.pop("phase", None)
    progress.phase(
        f"{run}: {phase}" if run and phase else phase or run, say=bool(phase)
    )  # back to the run: no line of its own
    if numbers:
        progress.step(min(tokens, progress.total), numbers)


def sampled_tokens(run: Path) -> int:
    """Tokens a running run has sampled so far (the ``metrics.jsonl`` of its directory ``run``)."""
    from agent_rl.run.tracking import read_metrics

    return int(sum(r.get("rollout/generated_tokens", 0) for r in read_metrics(run)))


def run_parallel(runs: list[tuple[str, int]], args: argparse.Namespace, progress: TaskProgress) -> None:
    """Each (method, seed) in its own process, ``--jobs`` at a time, one torch thread each; the
    progress sums the tokens the runs have sampled (read from their run directories every 10 s)."""
    flags = ["--setting", args.setting, "--model", str(args.model), "--device", args.device, "--out", str(args.out),
             "--budget-tokens", str(args.budget_tokens), "--eval-every-tokens", str(args.eval_every_tokens),
             "--eval-episodes", str(args.eval_episodes)]  # fmt: skip
    flags += ["--lr", str(args.lr)] if args.lr is not None else []
    flags += ["--max-steps", str(args.max_steps)] if args.max_steps is not None else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    pending, running, failed, finished = list(runs), {}, [], 0
    progress.phase(f"{min(args.jobs, len(runs))} runs at once (each one's progress in log-METHOD-sSEED.txt)")
    polled, last = 0.0, (-1, -1)
    while pending or running:
        while pending and len(running) < args.jobs:
            method, seed = pending.pop(0)
            log = open(args.out / f"log-{method}-s{seed}.txt", "w")  # noqa: SIM115 (closed when the run exits)
            cmd = [sys.executable, __file__, *flags, "--one", method, str(seed), *args.overrides]
            running[(method, seed)] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        time.sleep(1.0)
        for key, (proc, log) in list(running.items()):
            if proc.poll() is not None:
                log.close()
                del running[key]
                finished += 1
                if proc.returncode != 0:
                    failed.append(key)
                    print(f"{key[0]} seed {key[1]}: exit {proc.returncode} (log-{key[0]}-s{key[1]}.txt)", flush=True)
        if time.monotonic() - polled > 10 or not (pending or running):
            polled = time.monotonic()
            inflight = sum(min(sampled_tokens(run_dir(args.out, m, s)), args.budget_tokens) for m, s in running)
            position = finished * args.budget_tokens + inflight
            if (position, finished) != last:  # a line when a run moved on, not every 10 s
                last = (position, finished)
                progress.step(
                    position, {"runs done": finished, "running": ", ".join(f"{m} s{s}" for m, s in running) or "-"}
                )
    if failed:
        print(f"failed runs (see log-*.txt): {failed}", flush=True)


if __name__ == "__main__":
    main()
