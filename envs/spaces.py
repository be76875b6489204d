"""Gymnasium spaces for text environments: actions are any text, observations lists of messages."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces


class AnyText(spaces.Text):
    """A ``Text`` space whose ``contains`` accepts any string up to ``max_length``.

    Gymnasium's ``Text`` checks every character against a charset; model and tool output can hold
    any Unicode, so only the type and the length are checked here. ``sample()`` still draws from
    the default charset (random garbage: what an env must survive).
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class Messages(spaces.Space):
    """A list of ``{"role": str, "content": str}`` chat messages."""

    ROLES = ("system", "user", "assistant", "tool")

    def __init__(self, max_messages: int = 64, seed: int | None = None):
        self.max_messages = max_messages
        self._text = AnyText(max_length=256)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def seed(self, seed: int | None = None) -> list[int]:
        seeds = super().seed(seed)
        self._text.seed(int(self.np_random.integers(2**31)))
        return seeds

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        n = int(self.np_random.integers(1, 3))
        return [{"role": str(self.np_random.choice(self.ROLES)), "content": self._text.sample()} for _ in range(n)]

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, list)
            and len(x) <= self.max_messages
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in x
            )
        )

    def __repr__(self) -> str:
        return f"Messages(max_messages={self.max_messages})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Messages) and other.max_messages == self.max_messages
