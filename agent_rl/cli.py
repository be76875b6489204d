"""The ``agent-rl`` command line; the README's command table lists its subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent_rl.models.families import FAMILIES


def _config(args: argparse.Namespace):
    """The validated config; ``--print-config`` prints it, every default filled in, and exits."""
    from agent_rl.config import load_config
    from agent_rl.run.preflight import check_config_file

    if args.config is not None:
        check_config_file(args.config)
    cfg = load_config(args.config, args.overrides)
    if getattr(args, "print_config", False):
        print(cfg.to_yaml(), end="")
        raise SystemExit(0)
    return cfg


def _preflight(cfg, weights: bool = True) -> None:
    """What fails before anything is created: the model and the critic can be loaded."""
    from agent_rl.run.envloader import env_factory
    from agent_rl.run.preflight import check_model

    env_factory(cfg.env)  # an unknown env id first: the model's message names the env
    check_model(cfg.model.path, weights=weights, env_id=cfg.env.id)
    if cfg.learner.critic is not None and cfg.learner.critic.path is not None:
        check_model(cfg.learner.critic.path, key="learner.critic.path")


def _loading(command: str, cfg) -> None:
    """The first phase of a long command, said before the model loads (it can take a while)."""
    if cfg.tracking.progress:
        print(f"{command}: loading {cfg.model.path} on {cfg.model.device}, env {cfg.env.id}", flush=True)


def cmd_init_model(args: argparse.Namespace) -> int:
    from agent_rl.run.envloader import init_tiny

    if args.kind != "tiny":
        raise ValueError(f"unknown model kind '{args.kind}'; known: tiny")
    path = init_tiny(
        args.out,
        seed=args.seed,
        env_ids=args.env,
        family=args.family,
        max_position_embeddings=args.max_position_embeddings,
    )
    print(f"tiny {args.family} model and tokenizer saved to {path}")
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from agent_rl.commands.sft import sft

    cfg = _config(args)
    _preflight(cfg)
    _loading("sft", cfg)
    out, best = sft(cfg)
    print(f"SFT model: {out} (val success {best:.3f})")
    return 0


def cmd_train_rm(args: argparse.Namespace) -> int:
    from agent_rl.commands.train_rm import RewardModelConfig, train_reward_model
    from agent_rl.run.preflight import check_model

    check_model(args.model, key="--model")  # a missing directory: one line, not the hub's repo-id error
    keys = ("data", "model", "out", "steps", "batch_pairs", "lr", "heldout_frac", "seed", "loss", "rank_weight")
    train_reward_model(RewardModelConfig(**{k: getattr(args, k) for k in keys if getattr(args, k) is not None}))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from agent_rl.train.trainer import train

    if args.config is not None and "=" in args.config:  # `train --resume RUN k=v`: no config file given
        args.overrides.insert(0, args.config)
        args.config = None
    if args.resume and args.config is None:
        args.config = str(Path(args.resume) / "config.yaml")
    from agent_rl.learner.launch import RankFailedError
    from agent_rl.run.preflight import check_resume, checkpoint_step

    done = checkpoint_step(args.resume) if args.resume else 0  # a run directory with a checkpoint
    cfg = _config(args)
    if args.resume:
        check_resume(args.resume, done, cfg.trainer.steps)
    _preflight(cfg)
    _loading("train", cfg)
    try:
        run_dir = train(cfg, resume=args.resume)
    except RankFailedError as e:  # the rank printed its traceback; this line names it
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"run directory: {run_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agent_rl.commands.eval import run_eval

    cfg = _config(args)
    _preflight(cfg, weights=cfg.eval.policy is None)  # a scripted policy needs only the tokenizer
    _loading("eval", cfg)
    run_eval(cfg)
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from agent_rl.commands.quickstart import quickstart

    return quickstart(args.overrides, root=args.root, config=args.config)


def cmd_objectives(args: argparse.Namespace) -> int:
    from agent_rl.commands.catalog import render_catalog

    print(render_catalog(markdown=args.markdown, status=args.status))
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agent_rl.run.envloader import env_card, listed_env_ids

    table = Table("id", "description", "tools", "max turns", "reward", show_lines=True)
    for env_id in listed_env_ids(args.plugins):
        c = env_card(env_id)
        table.add_row(c["id"], c["description"], ", ".join(c["tools"]), str(c["max_turns"]), c["reward"])
    Console(width=args.width).print(table)
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    from sandbox import cli as sandbox_cli

    if args.action == "doctor":
        return sandbox_cli.doctor()
    return sandbox_cli.build_image(args.name, force=args.force)


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    from agent_rl.rollout.backends.server import build_state, check_exposure, serve

    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or None
    check_exposure(args.host, api_key)  # before the model loads
    if not Path(args.model).exists():
        raise ValueError(f"--model {args.model}: no such directory (a from_pretrained checkpoint)")
    state = build_state(
        args.model,
        args.dtype,
        args.device,
        args.served_model_name,
        batch_wait_ms=args.batch_wait_ms,
        max_batch_size=args.max_batch_size,
    )
    serve(state, args.host, args.port, api_key=api_key)
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    import os

    from agent_rl.proxy.serve import build_service, serve_proxy
    from agent_rl.rollout.backends.server import check_exposure

    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or None
    check_exposure(args.host, api_key)  # before the model loads
    if not Path(args.model).exists():
        raise ValueError(f"--model {args.model}: no such directory (a from_pretrained checkpoint)")
    service = build_service(
        args.model,
        served_name=args.served_model_name,
        tool_format=args.tool_format,
        dtype=args.dtype,
        device=args.device,
        max_new_tokens=args.max_new_tokens,
        max_total_tokens=args.max_total_tokens,
    )
    serve_proxy(service, args.host, args.port, api_key=api_key)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from agent_rl.commands.compare import compare

    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip()) if args.metrics else None
    labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
    out, report = compare(args.runs, metrics, x=args.x, out=args.out, labels=labels)
    print(report)
    print(f"plot written to {out}")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from agent_rl.commands.viewer import write_view

    out = write_view(args.run, args.out, tokenizer_path=args.tokenizer, last=args.last, page_size=args.page_size)
    print(f"viewer written to {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from agent_rl.commands.export import export

    out = export(Path(args.run), Path(args.out) if args.out else None, merge=args.merge, step=args.step)
    print(f"{'merged model' if args.merge else 'policy'} of {args.run} written to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agent-rl", description="Train tool-using LLM agents with RL.")
    sub = p.add_subparsers(dest="command", required=True)

    p.add_argument(
        "--debug", action="store_true", help="full tracebacks instead of one-line errors (also after the command)"
    )

    def with_config(sp: argparse.ArgumentParser, required: bool = True) -> None:
        sp.add_argument("config", nargs=None if required else "?", help="YAML config")
        sp.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.steps=10")
        sp.add_argument(
            "--print-config", action="store_true", help="print the resolved config (every default filled in) and exit"
        )

    sp = sub.add_parser("quickstart", help="init-model + sft + train + eval, with a before/after table")
    sp.add_argument("overrides", nargs="*", help="dotted overrides applied to the recipe")
    sp.add_argument(
        "--config", default=None, help="recipe YAML (default configs/quickstart.yaml), e.g. configs/math_tool.yaml"
    )
    sp.add_argument("--root", default=None, help="where models and runs go (default runs/<recipe name>)")
    sp.set_defaults(fn=cmd_quickstart)

    sp = sub.add_parser("init-model", help="build a tiny model + tokenizer in Hugging Face format")
    sp.add_argument("kind", choices=["tiny"])
    sp.add_argument("--out", required=True)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument(
        "--env", action="append", default=[], help="env id whose text the tokenizer also learns (repeatable)"
    )
    sp.add_argument(
        "--family",
        default="qwen2.5",
        choices=list(FAMILIES),
        help="special tokens, stop tokens and chat template of this model family",
    )
    sp.add_argument(
        "--max-position-embeddings",
        type=int,
        default=2048,
        help="context length in tokens (BFCL's multi-turn prompts need up to ~25k: python -m envs.bfcl.lengths)",
    )
    sp.set_defaults(fn=cmd_init_model)

    sp = sub.add_parser("sft", help="supervised warm start on demonstrations")
    with_config(sp)
    sp.set_defaults(fn=cmd_sft)

    sp = sub.add_parser("train", help="RL training")
    with_config(sp, required=False)
    sp.add_argument("--resume", help="run directory to continue from its last checkpoint")
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser(
        "train-rm", help="a Bradley-Terry reward model on preference pairs, with its held-out pair accuracy"
    )
    sp.add_argument("--data", required=True, help="JSONL of pairs {prompt, chosen, rejected} (messages or strings)")
    sp.add_argument("--model", required=True, help="base model path; its tokenizer renders the pairs")
    sp.add_argument("--out", required=True, help="output directory (model, tokenizer, metrics.json)")
    sp.add_argument("--steps", type=int, help="optimizer steps (100)")
    sp.add_argument("--batch-pairs", type=int, help="pairs per step (8)")
    sp.add_argument("--lr", type=float, help="AdamW learning rate (1e-4)")
    sp.add_argument("--heldout-frac", type=float, help="share of pairs held out for the accuracy (0.1)")
    sp.add_argument("--seed", type=int, help="split and batch order (0)")
    sp.add_argument(
        "--loss",
        choices=("bradley_terry", "egrm"),
        help="bradley_terry (default) or egrm: E-GRM's regression + ranking loss",
    )
    sp.add_argument("--rank-weight", type=float, help="egrm: weight of the ranking term (1.0)")
    sp.set_defaults(fn=cmd_train_rm)

    sp = sub.add_parser("eval", help="pass@k / mean@k on held-out tasks")
    with_config(sp)
    sp.set_defaults(fn=cmd_eval)

    sp = sub.add_parser("serve", help="our OpenAI-compatible completions server over the hf backend")
    sp.add_argument("--model", required=True, help="from_pretrained checkpoint directory")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8000, help="0: a free port (printed)")
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    sp.add_argument("--device", default="cpu")
    sp.add_argument("--served-model-name", default=None, help="name in /v1/models (default: --model)")
    sp.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        help="one batch gathers requests arriving less than this apart (up to 10 gaps)",
    )
    sp.add_argument("--max-batch-size", type=int, default=64)
    sp.add_argument(
        "--api-key",
        default=None,
        help="bearer token every /v1 endpoint requires (default: $OPENAI_API_KEY, what the trainer sends); "
        "required to bind a non-loopback --host",
    )
    sp.set_defaults(fn=cmd_serve)

    sp = sub.add_parser(
        "proxy", help="OpenAI chat-completions capture proxy over a checkpoint (docs/agent-programs.md)"
    )
    sp.add_argument("--model", required=True, help="from_pretrained checkpoint directory")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8001, help="0: a free port (printed)")
    sp.add_argument("--served-model-name", default="policy", help="the model name requests must use")
    sp.add_argument("--tool-format", default="auto", help="tool-call format (auto: detected from the tokenizer)")
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    sp.add_argument("--device", default="cpu")
    sp.add_argument("--max-new-tokens", type=int, default=512, help="cap of one completion")
    sp.add_argument("--max-total-tokens", type=int, default=4096, help="prompt + completion")
    sp.add_argument(
        "--api-key", default=None, help="bearer token required (default: $OPENAI_API_KEY); required off loopback"
    )
    sp.set_defaults(fn=cmd_proxy)

    sp = sub.add_parser("view", help="static HTML page of a run's trajectories")
    sp.add_argument("run", help="run directory (its trajectories/*.jsonl) or one .jsonl file")
    sp.add_argument("--out", default=None, help="HTML file (default: RUN/trajectories.html)")
    sp.add_argument("--tokenizer", default=None, help="tokenizer path (default: model.path of RUN/config.yaml)")
    sp.add_argument("--last", type=int, default=0, help="only the last N training steps (0: all)")
    sp.add_argument(
        "--page-size",
        type=int,
        default=None,
        help="episodes per page, loaded as you page (default: one page up to 200 episodes; beyond, pages of up to 25 that stay near 1 MB)",
    )
    sp.set_defaults(fn=cmd_view)

    sp = sub.add_parser(
        "export", help="a run's policy: a LoRA adapter in PEFT's format, or --merge'd into a Hugging Face model"
    )
    sp.add_argument("run", help="run directory (its newest checkpoint)")
    sp.add_argument(
        "--merge", action="store_true", help="fold a LoRA adapter into the base: a plain Hugging Face model"
    )
    sp.add_argument("--out", default=None, help="output directory (default: RUN/export, RUN/export_merged)")
    sp.add_argument("--step", type=int, default=None, help="the checkpoint of this step (default: the newest)")
    sp.set_defaults(fn=cmd_export)

    sp = sub.add_parser("compare", help="curves (PNG) and a table of metrics across runs, and their config differences")
    sp.add_argument("runs", nargs="+", help="run directories (their metrics.jsonl and config.yaml)")
    sp.add_argument(
        "--metrics",
        default=None,
        help="comma-separated metric names of metrics.jsonl (default: rollout/reward_mean, and eval/success when logged)",
    )
    sp.add_argument(
        "--x", default="step", choices=["step", "tokens"], help="align by training step or by sampled tokens"
    )
    sp.add_argument("--out", default="compare.png", help="PNG to write")
    sp.add_argument(
        "--labels",
        default=None,
        help="comma-separated names of the runs (default: directory names); "
        "runs given one name are a group (the seeds of a method): a mean curve, mean ± std in the table",
    )
    sp.set_defaults(fn=cmd_compare)

    sp = sub.add_parser("objectives", help="the registered objectives")
    sp.add_argument("action", choices=["list"])
    sp.add_argument("--markdown", action="store_true")
    sp.add_argument(
        "--status",
        default=None,
        choices=["reference", "paper", "interpretation"],
        help="only the entries of this status: reference (checked against another implementation's "
        "numbers), paper (the paper's own formula), interpretation (from an abstract or a third party, "
        "or with defaults of ours; choices recorded)",
    )
    sp.set_defaults(fn=cmd_objectives)

    sp = sub.add_parser("envs", help="the registered environments")
    sp.add_argument("action", choices=["list"])
    sp.add_argument("--plugins", nargs="*", default=[], help="also import these modules (a user's env package)")
    sp.add_argument("--width", type=int, default=160, help="table width in characters")
    sp.set_defaults(fn=cmd_envs)

    sp = sub.add_parser("sandbox", help="sandbox backends and images")
    sp.add_argument("action", choices=["doctor", "build-image"])
    sp.add_argument("--name", default=None, help="image name (build-image)")
    sp.add_argument("--force", action="store_true", help="rebuild even when the image exists")
    sp.set_defaults(fn=cmd_sandbox)
    return p


def _quiet_warnings() -> None:
    from agent_rl.run.progress import quiet_warnings

    quiet_warnings()


def main(argv: list[str] | None = None) -> int:
    from agent_rl.core.plugins import load_entry_points
    from agent_rl.train.breaker import InfraErrorRateError

    _quiet_warnings()

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # anywhere on the line, not only before the subcommand
    args = build_parser().parse_args([a for a in argv if a != "--debug"])
    try:
        load_entry_points()  # installed plugins, before any config is parsed or anything is listed
        return args.fn(args)
    except (ValueError, InfraErrorRateError, KeyboardInterrupt) as e:
        if "agent_rl.run.runtime" in sys.modules:  # a run that never started leaves no directory behind
            sys.modules["agent_rl.run.runtime"].discard_unstarted_run_dirs()
        if debug:
            raise
        if isinstance(e, KeyboardInterrupt):
            print("interrupted", file=sys.stderr)
            return 130
        print(f"error: {e}", file=sys.stderr)  # user mistakes: one clear line, no traceback
        return (
            3 if isinstance(e, InfraErrorRateError) else 2
        )  # 3: the run stopped itself, its infrastructure kept failing


if __name__ == "__main__":
    sys.exit(main())
