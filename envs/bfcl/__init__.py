"""BFCL v4 (the Berkeley Function Calling Leaderboard) as environments: ``multi_turn`` (its stateful
APIs, ``agent_rl/BFCL-MultiTurn-v0``) and ``calls`` (single-turn function calling scored by AST
matching, ``agent_rl/BFCL-Calls-v0``). The data ships inside ``bfcl-eval`` (``data.py``); docs/bfcl.md."""
