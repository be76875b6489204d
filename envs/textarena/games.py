"""Which TextArena games the adapter plays, and their legal moves (read from the upstream state).

Only games checked to run offline are offered. Word games load nltk's ``words`` corpus, which
nltk downloads at run time; with no network they fail, so they are refused in one line (no PyPI
package ships that word list in the form TextArena reads).
"""

from __future__ import annotations

from typing import Any

#: game family (the upstream id before ``-v0``) -> number of players; checked offline
SINGLE_PLAYER = (
    "FrozenLake",
    "TowerOfHanoi",
    "Minesweeper",
    "Mastermind",
    "2048",
    "Sudoku",
    "Crosswords",
    "GuessTheNumber",
    "Sokoban",
)
TWO_PLAYER = ("TicTacToe", "ConnectFour", "KuhnPoker")
#: families that download nltk corpora at run time
WORD_GAMES = (
    "Wordle",
    "Hangman",
    "WordLadder",
    "SpellingBee",
    "Codenames",
    "DontSayIt",
    "LetterAuction",
    "WordSearch",
    "WordChains",
)


def family(game: str) -> str:
    return game.split("-v", 1)[0]


def check_game(game: str) -> int:
    """The number of players of ``game`` (an upstream id such as ``FrozenLake-v0-hardcore``), or a
    one-line ``ValueError`` for a game this adapter does not play."""
    fam = family(game)
    if not game.startswith(f"{fam}-v") or game.endswith(("-raw", "-train")):
        raise ValueError(
            f"game: {game!r} is not an upstream TextArena id such as 'FrozenLake-v0' (no -raw / -train suffix)"
        )
    if fam in WORD_GAMES:
        raise ValueError(
            f"game: {game!r} is a word game: TextArena downloads nltk's word lists at run time, which fails offline; not supported"
        )
    if fam in SINGLE_PLAYER:
        return 1
    if fam in TWO_PLAYER:
        return 2
    raise ValueError(
        f"game: {game!r} is not one of the games checked offline here: {', '.join(SINGLE_PLAYER + TWO_PLAYER)}"
    )


def legal_moves(game: str, env: Any) -> list[str]:
    """The legal moves of the player to move, as upstream commands; empty where not known."""
    fam, state = family(game), env.state
    gs = state.game_state
    if fam == "FrozenLake":
        r, c = gs["player_pos"]
        n = len(gs["grid"])
        steps = {"up": (r - 1, c), "down": (r + 1, c), "left": (r, c - 1), "right": (r, c + 1)}
        return [f"[{d}]" for d, (rr, cc) in steps.items() if 0 <= rr < n and 0 <= cc < n]
    if fam == "TowerOfHanoi":
        towers = gs["towers"]
        return [
            f"[{a} {b}]"
            for a in "ABC"
            for b in "ABC"
            if a != b and towers[a] and (not towers[b] or towers[b][-1] > towers[a][-1])
        ]
    if fam == "TicTacToe":
        board = gs["board"]
        return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]
    if fam == "ConnectFour":
        return [f"[col {c}]" for c in range(len(gs["board"][0])) if gs["board"][0][c] == "."]
    if fam == "KuhnPoker":
        tree = gs.get("current_legal_action_tree")
        return [f"[{k}]" for k in tree] if isinstance(tree, dict) else []
    return []
