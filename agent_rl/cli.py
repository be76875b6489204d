"""The ``agent-rl`` command line; the README's command table lists its subcommands."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from agent_rl.models.families import FAMILIES


def _config(args: argparse.Namespace, weights: bool = True, model_path: str | None = None, before_paths=None):
    """The validated config; ``--print-config`` prints it, every default filled in, and exits.

    ``precheck`` first: the YAML, keys, names, the env id and the model's path are checked before
    torch and transformers are imported (``agent_rl/run/precheck.py``); ``model_path``: the path to
    check instead of the config's ``model.path`` (a resumed run's own); ``before_paths(raw)``: a
    command's own check of the raw config, before the paths."""
    from agent_rl.run.precheck import check_paths, precheck

    raw = precheck(args.config, args.overrides)
    if before_paths is not None:
        before_paths(raw)
    printing = getattr(args, "print_config", False)
    if not printing:  # the resolved config prints whether its model exists or not
        check_paths(raw, weights=weights, model_path=model_path)
    from agent_rl.config import load_config

    cfg = load_config(args.config, args.overrides)
    if printing:
        print(cfg.to_yaml(), end="")
        raise SystemExit(0)
    return cfg


def _preflight(cfg, weights: bool = True, model_path: str | None = None) -> None:
    """What fails before anything is created: the env can be made, the model and the critic loaded."""
    from agent_rl.run.envloader import env_factory
    from agent_rl.run.preflight import check_model

    env_factory(cfg.env)  # an unknown env id first: the model's message names the env
    check_model(model_path or cfg.model.path, weights=weights, env_id=cfg.env.id)
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
    cfg = _config(args)
    from agent_rl.commands.sft import sft

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
    from agent_rl.run.precheck import setting
    from agent_rl.run.preflight import check_resume, checkpoint_step, run_model_path

    if args.config is not None and "=" in args.config:  # `train --resume RUN k=v`: no config file given
        args.overrides.insert(0, args.config)
        args.config = None
    if args.resume and args.config is None:
        args.config = str(Path(args.resume) / "config.yaml")
    done = checkpoint_step(args.resume) if args.resume else 0  # a run directory with a checkpoint

    def resume_has_work(raw: dict) -> None:
        if args.resume:
            check_resume(args.resume, done, setting(raw, "trainer", "steps"))

    # a resumed run's model is its own config's model.path, whatever the config file given says
    run_model = run_model_path(args.resume) if args.resume else None
    cfg = _config(args, model_path=run_model, before_paths=resume_has_work)
    from agent_rl.learner.launch import RankFailedError
    from agent_rl.train.trainer import train

    _preflight(cfg, model_path=run_model)
    _loading("train", cfg)
    try:
        run_dir = train(cfg, resume=args.resume)
    except RankFailedError as e:  # the rank printed its traceback; this line names it
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not cfg.tracking.progress:  # else the run's summary names it
        print(f"run directory: {run_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agent_rl.core.rundirs import checkpoint_model, is_run_dir

    run = Path(args.config).expanduser()
    if run.is_dir():  # a run directory: its config and the model of its newest checkpoint (or --step's)
        if not is_run_dir(run):
            raise ValueError(f"{args.config}: a directory without config.yaml, not a run directory")
        model = checkpoint_model(run, args.step, key=str(args.config))
        args.config = str(run / "config.yaml")
        args.overrides.insert(0, f"model.path={model}")
    elif args.step is not None:
        raise ValueError(f"--step {args.step}: give a run directory, not a config file ({args.config})")
    scripted = any(o.startswith("eval.policy=") and o != "eval.policy=" for o in args.overrides)
    cfg = _config(args, weights=not scripted)
    from agent_rl.commands.eval import run_eval

    _preflight(cfg, weights=cfg.eval.policy is None)  # a scripted policy needs only the tokenizer
    _loading("eval", cfg)
    from agent_rl.train.evaluation import too_many_errors

    result, run_dir = run_eval(cfg)
    failed = too_many_errors(result.errors, result.errors + result.episodes)
    if failed is not None:  # exit 1: the errors are listed above, with their first messages
        print(f"error: {failed}; the episodes are in {run_dir / 'trajectories' / 'eval.jsonl'}", file=sys.stderr)
        return 1
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from agent_rl.commands.quickstart import quickstart

    return quickstart(args.overrides, root=args.root, config=args.config)


def cmd_objectives(args: argparse.Namespace) -> int:
    from agent_rl.core.names import load_names, plugins_add_names

    if plugins_add_names():  # a plugin's objectives: the registries themselves (they import torch)
        from agent_rl.commands.catalog import render_catalog

        print(render_catalog(markdown=args.markdown, status=args.status))
        return 0
    from agent_rl.commands import catalog_text

    print(catalog_text.render_catalog(load_names()["catalog"], markdown=args.markdown, status=args.status))
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

    from agent_rl.rollout.backends.server import check_exposure

    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or None
    check_exposure(args.host, api_key)  # before the model loads
    if not Path(args.model).exists():
        raise ValueError(f"--model {args.model}: no such directory (a from_pretrained checkpoint)")
    from agent_rl.proxy.serve import serve, server_app
    from agent_rl.rollout.backends.server import build_state

    state = build_state(
        args.model,
        args.dtype,
        args.device,
        args.served_model_name,
        batch_wait_ms=args.batch_wait_ms,
        max_batch_size=args.max_batch_size,
    )
    options = {"tool_format": args.tool_format, "max_new_tokens": args.max_new_tokens}
    app = server_app(state, api_key, max_total_tokens=args.max_total_tokens, **options)
    serve(app, state.model_name, args.host, args.port, api_key=api_key)
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


# what each route of `agent-rl serve` is for (its --help)
SERVE_ROUTES = (
    ("/v1/completions", "text or token-id prompts -> token ids, logprobs (the trainer's openai backend)"),
    ("/v1/chat/completions", "chat with tools, n, streaming, logprobs; recorded token-exact"),
    ("/v1/responses", "the Responses API (OpenAI Agents SDK); recorded token-exact"),
    ("/v1/sessions", "what chat and responses calls recorded (segments of exact token ids)"),
    ("/v1/models, /health, /tokenize", "the served name, liveness, vLLM's tokenizer route"),
    ("/v1/update_weights, /v1/policy_version", "the trainer's weight push and its check of the served weights"),
)

# one command line per subcommand, shown at the end of its --help
EXAMPLES: dict[str, tuple[str, ...]] = {
    "quickstart": ("agent-rl quickstart trainer.steps=10",),
    "init-model": ("agent-rl init-model tiny --out runs/models/tiny --env agent_rl/MathTool-v0",),
    "sft": ("agent-rl sft configs/quickstart.yaml model.path=runs/models/tiny sft.max_steps=100",),
    "train": (
        "agent-rl train configs/quickstart.yaml model.path=runs/models/tiny trainer.steps=2",
        "agent-rl train --resume runs/quickstart-grpo-ppo_clip-20250101-120000 trainer.steps=80",
    ),
    "train-rm": ("agent-rl train-rm --data pairs.jsonl --model runs/models/tiny --out runs/rm",),
    "eval": (
        "agent-rl eval configs/quickstart.yaml model.path=runs/models/tiny eval.episodes=32",
        "agent-rl eval runs/quickstart-grpo-ppo_clip-20250101-120000 --step 20",
    ),
    "serve": ("agent-rl serve --model runs/models/tiny --port 8000",),
    "view": ("agent-rl view runs/quickstart-grpo-ppo_clip-20250101-120000 --last 5",),
    "export": ("agent-rl export runs/quickstart-grpo-ppo_clip-20250101-120000 --merge",),
    "compare": ("agent-rl compare runs/a runs/b --metrics rollout/reward_mean --out compare.png",),
    "objectives": ("agent-rl objectives list --status paper",),
    "envs": ("agent-rl envs list --width 120",),
    "sandbox": ("agent-rl sandbox doctor",),
}


def _version() -> str:
    try:
        return metadata.version("agent_rl")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agent-rl",
        description="Train tool-using LLM agents with RL.",
        epilog="example:\n  agent-rl quickstart\n  agent-rl train configs/quickstart.yaml trainer.steps=2\n"
        "  agent-rl <command> --help   (each command's options and an example)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"agent-rl {_version()}", help="print the version and exit")
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
    sp.add_argument("kind", choices=["tiny"], help="what to build: tiny (a ~1M-parameter model for CPU runs)")
    sp.add_argument("--out", required=True, help="directory to write the model and tokenizer to")
    sp.add_argument("--seed", type=int, default=0, help="seed of the weights and of the tokenizer's corpus")
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
    sp.add_argument(
        "--resume", metavar="RUN", help="run directory to continue from its newest checkpoint (its own config.yaml)"
    )
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
    sp.add_argument(
        "--step", type=int, default=None, help="with a run directory: the checkpoint of this step (default: the newest)"
    )
    sp.set_defaults(fn=cmd_eval)

    sp = sub.add_parser(
        "serve",
        aliases=["proxy"],
        help="the OpenAI-compatible server over a checkpoint: completions, chat, responses, weight updates",
        description="One OpenAI-compatible server over the policy; every route samples from the same weights:\n"
        + "\n".join(f"  {route:<40} {what}" for route, what in SERVE_ROUTES),
    )
    sp.add_argument("--model", required=True, help="from_pretrained checkpoint directory")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    sp.add_argument("--port", type=int, default=8000, help="0: a free port (printed)")
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="weights' dtype")
    sp.add_argument("--device", default="cpu", help="torch device of the model, e.g. cpu, cuda, cuda:1")
    sp.add_argument(
        "--served-model-name", default="policy", help="the model name in /v1/models, which chat and responses need"
    )
    sp.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        help="one batch gathers requests arriving less than this apart (up to 10 gaps)",
    )
    sp.add_argument("--max-batch-size", type=int, default=64, help="most requests generated in one batch")
    sp.add_argument(
        "--tool-format", default="auto", help="chat and responses: tool-call format (auto: from the tokenizer)"
    )
    sp.add_argument("--max-new-tokens", type=int, default=512, help="chat and responses: cap of one completion")
    sp.add_argument("--max-total-tokens", type=int, default=4096, help="chat and responses: prompt + completion")
    sp.add_argument(
        "--api-key",
        default=None,
        help="bearer token every route but /health requires (default: $OPENAI_API_KEY, what the trainer sends); "
        "required to bind a non-loopback --host",
    )
    sp.set_defaults(fn=cmd_serve)

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
    sp.add_argument("action", choices=["list"], help="list: every entry with its status, formula and defaults")
    sp.add_argument("--markdown", action="store_true", help="as the tables of docs/objectives.md")
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
    sp.add_argument("action", choices=["list"], help="list: id, description, tools, max turns, reward")
    sp.add_argument("--plugins", nargs="*", default=[], help="also import these modules (a user's env package)")
    sp.add_argument("--width", type=int, default=160, help="table width in characters")
    sp.set_defaults(fn=cmd_envs)

    sp = sub.add_parser("sandbox", help="sandbox backends and images")
    sp.add_argument(
        "action",
        choices=["doctor", "build-image"],
        help="doctor: which backends work here; build-image: the docker image tool calls run in",
    )
    sp.add_argument("--name", default=None, help="image name (build-image)")
    sp.add_argument("--force", action="store_true", help="rebuild even when the image exists")
    sp.set_defaults(fn=cmd_sandbox)
    for name, example in EXAMPLES.items():
        if name not in sub.choices:
            continue
        sub.choices[name].epilog = "example:\n  " + "\n  ".join(example)
        sub.choices[name].formatter_class = argparse.RawDescriptionHelpFormatter
    return p


def _quiet_warnings() -> None:
    from agent_rl.run.progress import quiet_warnings

    quiet_warnings()


def main(argv: list[str] | None = None) -> int:
    from agent_rl.core.plugins import load_entry_points
    from agent_rl.train.breaker import ErrorRateError

    _quiet_warnings()

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # anywhere on the line, not only before the subcommand
    args = build_parser().parse_args([a for a in argv if a != "--debug"])
    try:
        load_entry_points()  # installed plugins, before any config is parsed or anything is listed
        return args.fn(args)
    except (ValueError, ErrorRateError, KeyboardInterrupt) as e:
        if "agent_rl.run.runtime" in sys.modules:  # a run that never started leaves no directory behind
            sys.modules["agent_rl.run.runtime"].discard_unstarted_run_dirs()
        if debug:
            raise
        if isinstance(e, KeyboardInterrupt):
            print("interrupted", file=sys.stderr)
            return 130
        print(f"error: {e}", file=sys.stderr)  # user mistakes: one clear line, no traceback
        return (
            3 if isinstance(e, ErrorRateError) else 2
        )  # 3: the run stopped itself, its infrastructure kept failing or its env kept raising


if __name__ == "__main__":
    sys.exit(main())
