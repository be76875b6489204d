"""The ``agent-rl`` subcommands that are not library code (``agent_rl/cli.py`` dispatches to them; nothing else imports them)."""
