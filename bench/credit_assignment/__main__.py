"""``python -m bench.credit_assignment``: see the package's docstring."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bench.credit_assignment as package
from agent_rl.run.progress import script_progress
from bench.credit_assignment.methods import METHODS
from bench.credit_assignment.running import ROOT, build_model, report, run_dir, run_one, run_parallel
from bench.credit_assignment.settings import SETTINGS
from bench.credit_assignment.summary import rows_from_run_dirs, run_dirs_from_results, summarize


def main() -> None:
    p = argparse.ArgumentParser(description=package.__doc__.splitlines()[0])
    p.add_argument(
        "--setting", default="maze", choices=list(SETTINGS), help="the environment (default: maze, the measured one)"
    )
    p.add_argument("--model", type=Path, default=None, help="the setting's SFT'd model (default: build one)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget-tokens", type=int, default=20_000, help="sampled policy tokens per run")
    p.add_argument("--eval-every-tokens", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument(
        "--initial-episodes",
        type=int,
        default=None,
        help="episodes of the 0-token evaluation (default: --eval-episodes)",
    )
    p.add_argument("--lr", type=float, default=None, help="learner.lr (default: the setting's, maze 1e-3)")
    p.add_argument(
        "--max-steps", type=int, default=None, help="stop each run after this many steps, even under the token budget"
    )
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "credit_bench")
    p.add_argument(
        "--summarize-only",
        action="store_true",
        help="redraw the plot and table from results-*.jsonl, results.jsonl, or else the run directories alone",
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
    if not rows and args.summarize_only:  # a comparison that committed only its run directories
        rows = rows_from_run_dirs(args.out)
    if not rows:
        p.error(f"--out {args.out}: no results-*.jsonl, results.jsonl or runs/*/metrics.jsonl to summarize")
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


if __name__ == "__main__":
    main()
