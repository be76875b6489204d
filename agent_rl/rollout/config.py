"""The rollout's configuration: the ``rollout`` section of a run's config, and what the engine reads.

One model for both: ``agent-rl`` commands validate it from YAML and overrides, and the
``RolloutEngine`` takes it as it is. Objectives that change how episodes are rolled out (the
``forced_interruption`` filter) set their fields through ``with_options``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    model_validator,
)

from agent_rl.core.registry import ComponentConfig
from agent_rl.rollout.backends import BACKENDS
from tools.formats import FORMATS

BackendSpec = Annotated[SerializeAsAny[ComponentConfig], BeforeValidator(BACKENDS.parse_config)]


class RolloutConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    backend: BackendSpec = Field(default_factory=lambda: BACKENDS.parse_config({"name": "hf"}))
    group_size: int = Field(8, ge=1, description="samples per task (G)")
    max_turns: int = Field(4, ge=1)
    max_new_tokens: int = Field(64, ge=1, description="per assistant turn")
    max_total_tokens: int = Field(
        1024,
        ge=8,
        description="whole episode: prompt + turns + observations (per_turn: also each turn's context + its tokens)",
    )
    max_tool_response_tokens: int = Field(128, ge=1, description="longer tool responses are cut with a visible marker")
    temperature: float = Field(
        1.0,
        description="sampling temperature; the learner applies the same, so training needs > 0 (0: greedy, evaluation)",
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    concurrency: int = Field(64, ge=1, description="episodes in flight at once")
    max_batch_requests: int | None = Field(
        None,
        ge=1,
        description="generation requests per backend call (null: all waiting); ~concurrency/2 "
        "makes two cohorts that alternate generation and tool calls (CPU)",
    )
    ignore_eos: bool = Field(False, description="always generate max_new_tokens per turn (benchmarks)")
    topk: int = Field(0, ge=0, description="record the sampler's top-k candidates per token (sis, score_centering)")
    layout: Literal["concat", "per_turn"] = Field(
        "concat",
        description="concat: one training row per episode; per_turn: one row per assistant turn with the context "
        "the model saw (re-rendered each turn, for templates that rewrite history). Left unset, a run whose chat "
        "template rewrites history gets per_turn (said once in the log)",
    )
    check_drift: bool = Field(
        True, description="count observations whose re-rendered history differs from the stored ids (render_drift)"
    )
    on_drift: Literal["count", "drop"] = Field(
        "count",
        description="count: drift is counted (render_drift); drop: an episode whose tokens cannot be shown to be "
        "exactly what was sampled under the template is never trained on (dropped, counted in rollout/drift_dropped)",
    )
    on_weights_mismatch: Literal["stop", "refuse"] = Field(
        "stop",
        description="the sampler reports other weights than the learner's after a sync (another run's, a restarted "
        "server's): stop the run in one line, or refuse (count and never train on) the samples of that version",
    )
    max_logprob_gap: float = Field(
        1e-3,
        gt=0,
        description="train/mismatch_logprob_abs_max above this says once why (dtype, stale weights, template drift)",
    )
    on_logprob_gap: Literal["warn", "stop"] = Field(
        "warn", description="warn: one line, the run goes on; stop: the run stops at the first step above the gap"
    )
    tool_format: str = Field(
        "auto",
        description="how the model writes tool calls: auto (detected from the tokenizer's chat template) or a "
        "tools.formats name (hermes, llama3_json, mistral, harmony, pythonic, fenced); env.options.tool_format wins",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra chat template variables on every render, e.g. {enable_thinking: false}"
    )
    thinking_budget: int | None = Field(
        None,
        ge=1,
        description="tokens of reasoning allowed per assistant turn (null: no limit); past it the engine "
        "appends the format's closing tag (e.g. </think>, mask 0) and the same turn goes on with the answer",
    )
    # ScaleRL forced interruption (set by the ``forced_interruption`` filter): after this many generated
    # tokens, ``interrupt_message`` is appended (mask 0) inside the assistant's turn and it may generate
    # ``answer_budget_tokens`` more before the turn is cut
    think_budget_tokens: int | None = Field(
        None, ge=1, description="forced interruption: generated tokens before the interruption (null: off)"
    )
    answer_budget_tokens: int = Field(
        0, ge=0, description="forced interruption: tokens allowed after the interruption message"
    )
    interrupt_message: str = Field("", description="forced interruption: the text appended inside the turn")

    @model_validator(mode="before")
    @classmethod
    def _checks(cls, raw: Any) -> Any:
        """The engine's own messages (a test or script building the config directly reads them too)."""
        if not isinstance(raw, dict):
            return raw
        layout, concurrency, batch = raw.get("layout"), raw.get("concurrency"), raw.get("max_batch_requests")
        temperature = raw.get("temperature")
        if isinstance(temperature, int | float) and temperature < 0:
            raise ValueError(
                f"rollout.temperature must be greater than 0 (or 0: greedy, for evaluation), got {temperature}"
            )
        if layout is not None and layout not in ("concat", "per_turn"):
            raise ValueError(f"rollout.layout: unknown layout '{layout}'; allowed: concat, per_turn")
        if isinstance(concurrency, int) and concurrency < 1:
            raise ValueError(f"rollout.concurrency must be >= 1, got {concurrency}")
        if isinstance(batch, int) and batch < 1:
            raise ValueError(f"rollout.max_batch_requests must be >= 1 or null, got {batch}")
        tool_format = raw.get("tool_format")
        if isinstance(tool_format, str) and tool_format != "auto":
            if tool_format not in FORMATS:
                raise ValueError(
                    f"rollout.tool_format: unknown format '{tool_format}'; allowed: auto, {', '.join(sorted(FORMATS))}"
                )
        return raw

    def with_options(self, temperature: float | None = None, **options: Any) -> RolloutConfig:
        """A validated copy with ``options`` set (and the temperature, when given)."""
        if temperature is not None:
            options["temperature"] = temperature
        return self.model_validate({**self.model_dump(), **options}) if options else self
