"""The text-game adapters against their upstream packages, and the cost of many JVM games at once.

(a) env steps/s through ``TextWorldExpress-v0`` / ``ScienceWorld-v0`` / ``TextArena-v0`` vs the raw
    upstream loop on the same games and the same commands (the expert's, recorded first), rounds
    interleaved, after one unmeasured pass of each (the two sides run in two JVMs, each warmed);
    resets count as steps on both sides. In a round each side repeats its pass until
    ``--min-seconds`` (0.5) have passed: one TextArena pass takes ~10 ms, and on a shared machine
    single passes gave per-round ratios from 0.62 to 1.12. Target: ours >= 0.8x the raw loop. The raw ScienceWorld
    loop is the upstream's ``step()``, which also lists the valid actions; ours asks for them only
    when ``valid_actions`` shows them (off by default).
(b) ``--concurrent N``: N ``TextWorldExpress-v0`` (``--concurrent-family sw``: ``ScienceWorld-v0``)
    envs reset at once from N threads (what the
    rollout engine does with ``rollout.concurrency`` N: one env, so one JVM, per running episode),
    then one gold episode each; prints the wall time until all have reset, the resident memory of
    the JVMs (the sum of their ``VmRSS``, and the largest) and of this process. ``--jvm-max-heap-mb``
    is the envs' ``jvm_max_heap_mb`` (256, their default; 0: the JVM's default maximum heap).

(c) ``--rollout N``: rollout tokens/s of ``RolloutEngine`` + the ``hf`` backend on N Cooking World
    episodes of exactly 20 turns (``configs/twx_cooking_long.yaml`` with 20 turns; the model at
    ``--model``, else a random-init tiny model, fails them all, so each runs to the budget): the
    same batch twice, the second measured, so its envs and JVMs are warm; generated tokens/s and
    episode tokens (prompt, observations, generated) per second.

``python bench/text_games.py [--rounds 3] [--episodes 40] [--min-seconds 0.5] [--families twx,sw,ta]
[--concurrent 64 [--concurrent-family twx|sw] [--jvm-max-heap-mb 256]] [--rollout 16 [--model DIR]]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_rl.run.progress import script_progress  # noqa: E402 (after the path of a checkout)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the games and their commands, recorded once through our env ----------------------------------
def record(env, policy, episodes: int) -> list[tuple[dict, list[str]]]:
    """``(task, commands)`` of ``episodes`` expert episodes on the test split."""
    import random

    out = []
    for seed in range(episodes):
        obs, info = env.reset(seed=seed, options={"split": "test"})
        messages, commands, rng = list(obs), [], random.Random(seed)
        while True:
            action = policy(messages, rng)
            obs, _, terminated, truncated, step_info = env.step(action)
            messages += [{"role": "assistant", "content": action}] + obs
            commands.append(step_info["command"])
            if terminated or truncated:
                break
        out.append((info["task"], commands))
    return out


def ours_loop(env, games) -> int:
    steps = 0
    for task, commands in games:
        env.reset(options={"task": task})
        for c in commands:
            env.step(c)
        steps += 1 + len(commands)
    return steps


def twx_raw(sim, games) -> int:
    steps, loaded = 0, None
    for task, commands in games:
        if loaded != (task["game"], task["params"]):
            sim.load(gameName=task["game"], gameParams=task["params"])
            loaded = (task["game"], task["params"])
        sim.reset(seed=task["seed"], gameFold=task["fold"], generateGoldPath=True)
        sim.getGoldActionSequence()
        for c in commands:
            sim.step(c)
        steps += 1 + len(commands)
    return steps


def sw_raw(sim, games) -> int:
    steps, loaded = 0, None
    for task, commands in games:
        key = (task["task"], task["variation"], task["simplifications"])
        if loaded != key:
            sim.load(task["task"], task["variation"], task["simplifications"], generateGoldPath=True)
            sim.get_gold_action_sequence()
            loaded = key
        sim.reset()
        for c in commands:
            sim.step(c)
        steps += 1 + len(commands)
    return steps


def ta_raw(game: str, games) -> int:
    import textarena as ta

    env, steps = ta.make(game + "-raw"), 0
    for task, commands in games:
        env.reset(num_players=1, seed=task["seed"])
        env.get_observation()
        for c in commands:
            env.step(c if "[" in c else f"[{c}]")
            env.get_observation()
        steps += 1 + len(commands)
    return steps


def steps_per_second(loop, min_seconds: float) -> float:
    """Steps/s of ``loop`` (one pass over the games; returns its steps), repeated until
    ``min_seconds`` have passed (at least once)."""
    steps, t0 = 0, time.perf_counter()
    while True:
        steps += loop()
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return steps / elapsed


def throughput(args, progress) -> dict[str, float]:
    import gymnasium as gym

    import envs  # noqa: F401
    from envs.scienceworld import policies as sw_policies
    from envs.textarena import policies as ta_policies
    from envs.textworld_express import policies as twx_policies

    sides = {}
    if "twx" in args.families:
        from textworld_express import TextWorldExpressEnv

        env = gym.make("agent_rl/TextWorldExpress-v0", game="cooking", max_turns=60).unwrapped
        games = record(env, twx_policies.gold, args.episodes)
        sim = TextWorldExpressEnv(envStepLimit=10**9)
        sides["twx"] = (
            lambda e=env, g=games: ours_loop(e, g),
            lambda s=sim, g=games: twx_raw(s, g),
            [env.close, sim.close],
        )
    if "sw" in args.families:
        from scienceworld import ScienceWorldEnv

        env = gym.make(
            "agent_rl/ScienceWorld-v0", task="find-living-thing", simplifications="easy", max_turns=60
        ).unwrapped
        games = record(env, sw_policies.gold, max(2, args.episodes // 10))
        sim = ScienceWorldEnv("", envStepLimit=10**9)
        sides["sw"] = (
            lambda e=env, g=games: ours_loop(e, g),
            lambda s=sim, g=games: sw_raw(s, g),
            [env.close, sim.close],
        )
    if "ta" in args.families:
        env = gym.make("agent_rl/TextArena-v0", game="FrozenLake-v0-hardcore", max_turns=60).unwrapped
        games = record(env, ta_policies.solver, args.episodes)
        sides["ta"] = (
            lambda e=env, g=games: ours_loop(e, g) * 1,
            lambda g=games: ta_raw("FrozenLake-v0-hardcore", g),
            [env.close],
        )
    rates: dict[str, dict[str, list[float]]] = {f: {"ours": [], "raw": []} for f in sides}
    for ours, raw, _ in sides.values():  # one pass each first: both JVMs compile the same code paths
        ours()
        raw()
    for r in range(args.rounds):
        for family, (ours, raw, _) in sides.items():
            for name, fn in (("raw", raw), ("ours", ours)) if r % 2 else (("ours", ours), ("raw", raw)):
                rates[family][name].append(steps_per_second(fn, args.min_seconds))
            progress.advance({f"{family} ours/raw": rates[family]["ours"][-1] / rates[family]["raw"][-1]})
    out = {}
    for family, (_, _, closers) in sides.items():
        ours, raw = statistics.median(rates[family]["ours"]), statistics.median(rates[family]["raw"])
        out[family] = ours / raw
        print(
            f"{family}: ours {ours:.1f} steps/s, raw upstream {raw:.1f} steps/s, ratio {ours / raw:.3f} (median of {args.rounds} rounds)"
        )
        for close in closers:
            close()
    return out


def concurrent(n: int, family: str, heap_mb: int | None, progress) -> None:
    import gymnasium as gym

    import envs  # noqa: F401
    from envs.scienceworld import policies as sw_policies
    from envs.textworld_express import policies as twx_policies

    env_id, policies = {
        "twx": ("agent_rl/TextWorldExpress-v0", twx_policies),
        "sw": ("agent_rl/ScienceWorld-v0", sw_policies),
    }[family]
    made = [gym.make(env_id, jvm_max_heap_mb=heap_mb).unwrapped for _ in range(n)]
    progress.phase(f"{n} {env_id} resets at once")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        list(pool.map(lambda ie: ie[1].reset(seed=ie[0], options={"split": "test"}), enumerate(made)))
    started = time.perf_counter() - t0
    jvm_mb = sum(rss_mb(e._jvm.process().pid) for e in made)
    print(
        f"{n} {env_id}: all reset after {started:.1f} s wall; JVMs resident {jvm_mb:.0f} MB ({jvm_mb / n:.0f} MB each); "
        f"this process {rss_mb(os.getpid()):.0f} MB"
    )

    def episode(ie):
        i, env = ie
        obs, _ = env.reset(seed=i, options={"split": "test"})
        messages = list(obs)
        while True:
            action = policies.gold(messages)
            obs, _, terminated, truncated, info = env.step(action)
            messages += [{"role": "assistant", "content": action}] + obs
            if terminated or truncated:
                return info["success"]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        wins = sum(pool.map(episode, enumerate(made)))
    each = [rss_mb(e._jvm.process().pid) for e in made]
    print(
        f"{n} gold episodes at once: {wins}/{n} succeeded in {time.perf_counter() - t0:.1f} s; JVMs then {sum(each):.0f} MB "
        f"({sum(each) / n:.0f} MB each, at most {max(each):.0f}; -Xmx {heap_mb or 'the JVM default'}{'m' if heap_mb else ''})"
    )
    for env in made:
        env.close()


def rollout(n: int, model: str | None, progress) -> None:
    import tempfile

    import torch

    from agent_rl.config import load_config
    from agent_rl.run.envloader import init_tiny
    from agent_rl.run.runtime import Components
    from agent_rl.train.evaluation import eval_specs

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    model = model or str(init_tiny(Path(tmp.name) / "tiny", env_ids=("agent_rl/TextWorldExpress-v0",)))
    overrides = [
        f"model.path={model}",
        "env.options.max_turns=20",
        "rollout.max_turns=20",
        "rollout.max_total_tokens=2048",
        f"rollout.concurrency={n}",
    ]
    cfg = load_config(ROOT / "configs" / "twx_cooking_long.yaml", overrides)
    engine = Components(cfg).engine()
    specs = eval_specs(n, 1, "test")
    progress.phase(f"rollout: {n} x 20-turn episodes (warm-up)")
    engine.run_sync(specs)  # starts the envs and their JVMs
    progress.phase(f"rollout: {n} x 20-turn episodes (measured)")
    t0 = time.perf_counter()
    trajectories = engine.run_sync(specs)
    wall = time.perf_counter() - t0
    engine.close()
    generated = sum(t.num_generated_tokens for t in trajectories)
    total = sum(len(t.token_ids_T) for t in trajectories)
    turns = [len(t.turns_N) for t in trajectories]
    print(
        f"rollout: {n} episodes, {min(turns)}-{max(turns)} turns, {wall:.1f} s: {generated / wall:.1f} generated tokens/s "
        f"({generated} tokens), {total / wall:.0f} episode tokens/s ({total} tokens)"
    )
    tmp.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=40, help="games per family (ScienceWorld: a tenth, at least 2)")
    ap.add_argument("--min-seconds", type=float, default=0.5, help="each side's time in a round, at least")
    ap.add_argument("--families", default="twx,sw,ta")
    ap.add_argument("--concurrent", type=int, default=0, help="also start N JVM envs at once")
    ap.add_argument("--concurrent-family", default="twx", choices=("twx", "sw"))
    ap.add_argument("--jvm-max-heap-mb", type=int, default=256, help="the envs' jvm_max_heap_mb (0: the JVM's default)")
    ap.add_argument("--rollout", type=int, default=0, help="also N 20-turn episodes through the rollout engine")
    ap.add_argument("--model", default=None, help="the model of --rollout (default: a random-init tiny model)")
    args = ap.parse_args()
    args.families = args.families.split(",")
    total = args.rounds * len(args.families) + bool(args.concurrent) + bool(args.rollout)
    progress = script_progress("bench/text_games.py", total, unit="round")
    ratios = throughput(args, progress) if args.rounds else {}
    if args.concurrent:
        concurrent(args.concurrent, args.concurrent_family, args.jvm_max_heap_mb or None, progress)
        progress.advance()
    if args.rollout:
        rollout(args.rollout, args.model, progress)
        progress.advance()
    missed = [f for f, r in ratios.items() if r < 0.8]
    progress.finish(numbers={"below 0.8x": ", ".join(missed) or "none"})
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
