"""One static, self-contained HTML page of a run's trajectories (``agent-rl view``).

Per step, each episode: its header (reward, stop reason, turns, policy versions), then its tokens
in order, split into the prompt, the assistant turns and the observations. Every token is one
``<span class="t m0|m1">`` carrying ``data-i`` (position), ``data-id`` (token id), ``data-lp`` (the
sampler's logprob) and, when the trainer stored them, ``data-adv`` (advantage). Colours: policy
tokens (loss mask 1) green, prompt / observation tokens (mask 0) grey; in "advantage" mode policy
tokens go blue (positive) or red (negative) by the size of their advantage. Tool calls found in
a turn are listed above it. Plain JS filters episodes by text, stop reason and reward.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from typing import Any

from agent_rl.run.trajectories import Step, TokenTexts

MASK_COLOURS = {0: "#e8e8e8", 1: "#b7e4b0"}  # prompt / observation, policy
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
# control characters (bytes a model may sample) shown as \xNN: invalid in HTML, invisible anyway
CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F] if chr(c) not in "\n\t"}


def _visible(text: str) -> str:
    return html.escape(text.translate(CONTROL))


CSS = """
body { font-family: sans-serif; margin: 0 1.5em 2em; color: #222; }
header.top { position: sticky; top: 0; background: #fff; padding: .6em 0; border-bottom: 1px solid #ccc; z-index: 2; }
header.top input, header.top select { margin-right: 1em; }
.legend span { padding: 0 .4em; margin-right: .5em; }
section.step > h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
.episode { border: 1px solid #ccc; border-radius: 4px; margin: .6em 0; padding: .4em .6em; }
.episode .head { font-size: .85em; margin-bottom: .3em; }
.episode .head b { margin-right: .8em; }
.seg { font-family: monospace; font-size: 13px; white-space: pre-wrap; word-break: break-all; margin: .25em 0;
       padding-left: .5em; border-left: 3px solid #bbb; }
.seg.turn { border-left-color: #3a9a3a; }
.seg .label { display: block; font-family: sans-serif; font-size: .75em; color: #666; white-space: normal; }
.toolcall { font-family: monospace; font-size: .8em; color: #5a3d9a; white-space: normal; }
.t { box-shadow: inset -1px 0 0 rgba(255,255,255,.8); }  /* token boundaries */
.t.m0 { background: #e8e8e8; }
.t.m1 { background: #b7e4b0; }
body.adv .t.m1 { background: var(--adv, #b7e4b0); }
#tip { position: fixed; display: none; background: #333; color: #fff; font: 12px monospace; padding: 3px 6px;
       border-radius: 3px; pointer-events: none; z-index: 3; }
.hidden { display: none; }
"""

JS = """
const q = document.getElementById('search'), stop = document.getElementById('stop');
const minr = document.getElementById('minreward'), mode = document.getElementById('mode');
const shown = document.getElementById('shown');
function filter() {
  const text = q.value.toLowerCase(), s = stop.value, r = parseFloat(minr.value);
  let n = 0;
  for (const ep of document.querySelectorAll('.episode')) {
    const reward = ep.dataset.reward === '' ? NaN : parseFloat(ep.dataset.reward);
    const ok = (!text || ep.textContent.toLowerCase().includes(text)) && (!s || ep.dataset.stop === s)
      && (isNaN(r) || reward >= r);
    ep.classList.toggle('hidden', !ok);
    n += ok;
  }
  shown.textContent = n;
}
q.oninput = stop.onchange = minr.oninput = filter;
mode.onchange = () => document.body.classList.toggle('adv', mode.value === 'advantage');
filter();
"""

# the token tooltip, and #advantage in the address: advantage colours (both pages)
JS_TOOLTIP = """
const modeSel = document.getElementById('mode'), tipEl = document.getElementById('tip');
if (location.hash === '#advantage' && modeSel.querySelector('[value=advantage]')) { modeSel.value = 'advantage'; modeSel.onchange(); }
document.addEventListener('mouseover', e => {
  const t = e.target.closest('.t');
  if (!t) { tipEl.style.display = 'none'; return; }
  const d = t.dataset;
  tipEl.textContent = `#${d.i} id=${d.id} mask=${t.classList.contains('m1') ? 1 : 0}` +
    (d.lp !== undefined ? ` logprob=${d.lp}` : '') + (d.adv !== undefined ? ` adv=${d.adv}` : '');
  tipEl.style.display = 'block';
});
document.addEventListener('mousemove', e => { tipEl.style.left = (e.clientX + 12) + 'px'; tipEl.style.top = (e.clientY + 12) + 'px'; });
"""


def _adv_colour(adv: float, scale: float) -> str:
    alpha = 0.15 + 0.45 * min(1.0, abs(adv) / scale) if scale > 0 else 0.15
    rgb = "33,102,172" if adv >= 0 else "178,24,43"
    return f"rgba({rgb},{alpha:.2f})"


def _segments(traj: dict[str, Any]) -> list[tuple[str, int, int, dict | None]]:
    """(kind, start, end, turn) covering every token once: prompt, turns, observations, anything between."""
    out: list[tuple[str, int, int, dict | None]] = []
    pos, n = 0, len(traj["token_ids_T"])
    spans = []
    for k, turn in enumerate(traj["turns_N"]):
        spans.append(("turn", turn["start"], turn["end"], {**turn, "index": k}))
        if turn["obs_end"] > turn["obs_start"]:
            spans.append(("observation", turn["obs_start"], turn["obs_end"], None))
    for kind, start, end, turn in sorted(spans, key=lambda s: (s[1], s[2])):
        if start > pos:
            out.append(("prompt" if not out else "context", pos, start, None))
        if end > max(start, pos):
            out.append((kind, max(start, pos), end, turn))
        pos = max(pos, end)
    if pos < n:
        out.append(("prompt" if not out else "tail", pos, n, None))
    return out


def _tool_calls(text: str) -> list[str]:
    calls = []
    for raw in TOOL_CALL.findall(text):
        try:
            call = json.loads(raw)
            args = call.get("arguments", {})
            calls.append(f"{call.get('name', '?')}({json.dumps(args)[:200]})")
        except (json.JSONDecodeError, AttributeError):
            calls.append(f"malformed tool call: {raw[:120]}")
    return calls


def render_tokens(traj: dict[str, Any], start: int, end: int, texts: TokenTexts, adv_scale: float) -> str:
    ids, mask = traj["token_ids_T"], traj["loss_mask_T"]
    logprobs = traj.get("rollout_logprobs_T") or []
    advantages = (traj.get("info") or {}).get("advantages_T")
    parts = []
    for i in range(start, end):
        m = 1 if mask[i] else 0
        attrs = f'data-i="{i}" data-id="{ids[i]}"'
        if m and i < len(logprobs):
            attrs += f' data-lp="{logprobs[i]:.4f}"'
        if advantages is not None and i < len(advantages):
            attrs += f' data-adv="{advantages[i]:.4f}"'
            if m:
                attrs += f' style="--adv:{_adv_colour(advantages[i], adv_scale)}"'
        parts.append(f'<span class="t m{m}" {attrs}>{_visible(texts(ids[i]))}</span>')
    return "".join(parts)


def render_episode(traj: dict[str, Any], texts: TokenTexts, adv_scale: float) -> str:
    reward = traj.get("reward")
    stop = traj["stop_reason"]
    turns = traj["turns_N"]
    versions = sorted({t.get("policy_version", 0) for t in turns})
    info = traj.get("info") or {}
    head = [
        f'<b class="eid">{html.escape(str(traj.get("episode_id", "")))}</b>',
        f'<b>reward <span class="reward">{"none" if reward is None else f"{reward:g}"}</span></b>',
        f'<b>stop <span class="stop">{html.escape(stop)}</span></b>',
        f"<b>turns {len(turns)}</b>",
        f"<b>policy v{','.join(map(str, versions)) or '-'}</b>",
        f"<b>tokens {sum(1 for m in traj['loss_mask_T'] if m)}/{len(traj['token_ids_T'])}</b>",
        f"<span>task {html.escape(str(traj.get('task_id', '')))} · group {html.escape(str(traj.get('group_id', '')))}</span>",
    ]
    if traj.get("parent_id"):  # a branch (fork): it shares its parent's tokens before branch_point
        head.append(
            f"<span>forked from {html.escape(str(traj['parent_id']))} at token {traj.get('branch_point')}</span>"
        )
    if info.get("error"):
        head.append(f'<div class="error">error: {html.escape(str(info["error"]))[:500]}</div>')
    segs = []
    for kind, start, end, turn in _segments(traj):
        label = kind
        extra = ""
        if turn is not None:
            label = (
                f"assistant turn {turn['index'] + 1} · reward {turn.get('reward', 0.0):g} · "
                f"policy v{turn.get('policy_version', 0)}{'' if turn.get('action_valid', True) else ' · invalid action'}"
            )
            calls = _tool_calls(texts.text(traj["token_ids_T"][start:end]))
            extra = "".join(f'<div class="toolcall">tool call: {html.escape(c)}</div>' for c in calls)
        elif kind == "observation" and "<tool_response>" in texts.text(traj["token_ids_T"][start:end]):
            label = "observation · tool result"
        seg_class = "turn" if turn is not None else kind
        segs.append(
            f'<div class="seg {seg_class}"><span class="label">{label}</span>{extra}'
            f"{render_tokens(traj, start, end, texts, adv_scale)}</div>"
        )
    reward_attr = "" if reward is None else f"{reward}"
    return (
        f'<div class="episode" data-stop="{html.escape(stop)}" data-reward="{reward_attr}">'
        f'<div class="head">{" ".join(head)}</div>{"".join(segs)}</div>'
    )


def adv_scale_of(trajs: list[dict[str, Any]]) -> float:
    """The largest |advantage| stored with the episodes (0.0: none stored): the full colour."""
    return max((abs(a) for t in trajs for a in (t.get("info") or {}).get("advantages_T") or []), default=0.0)


def render_page(steps: list[Step], texts: TokenTexts, title: str) -> str:
    all_trajs = [t for s in steps for t in s.trajectories]
    adv_scale = advs = adv_scale_of(all_trajs)
    stops = sorted({t["stop_reason"] for t in all_trajs})
    body = []
    for step in steps:
        rewards = [t["reward"] for t in step.trajectories if t.get("reward") is not None]
        counts = Counter(t["stop_reason"] for t in step.trajectories)
        mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "-"
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        episodes = "".join(render_episode(t, texts, adv_scale) for t in step.trajectories)
        body.append(
            f'<section class="step"><h2>{html.escape(step.label)} · {len(step.trajectories)} episodes · '
            f"mean reward {mean} · {html.escape(summary)}</h2>{episodes}</section>"
        )
    options = "".join(f'<option value="{html.escape(s)}">{html.escape(s)}</option>' for s in stops)
    legend = (
        f'<span class="legend"><span style="background:{MASK_COLOURS[1]}">policy (mask 1)</span>'
        f'<span style="background:{MASK_COLOURS[0]}">prompt / observation (mask 0)</span>'
        + ("<span>advantage: blue &gt; 0, red &lt; 0</span>" if advs else "")
        + "</span>"
    )
    mode = '<option value="mask">colour: loss mask</option>' + (
        '<option value="advantage">colour: advantage</option>' if advs else ""
    )
    controls = (
        '<input id="search" type="search" placeholder="search text">'
        f'<select id="stop"><option value="">all stop reasons</option>{options}</select>'
        '<input id="minreward" type="number" step="any" placeholder="min reward" style="width:8em">'
        f'<select id="mode">{mode}</select>'
        f'<span><span id="shown">{len(all_trajs)}</span>/{len(all_trajs)} episodes</span> {legend}'
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>"
        f'<header class="top"><b>{html.escape(title)}</b><br>{controls}</header>'
        f'{"".join(body)}<div id="tip"></div><script>{JS}{JS_TOOLTIP}</script></body></html>'
    )
