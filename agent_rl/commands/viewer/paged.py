"""The viewer for many episodes: an index the browser filters, and the episodes loaded a page at a time.

The HTML file holds a compact index of every episode (step, episode id, env, reward, stop reason,
turns, policy tokens) and the first page's episodes; the others are rendered into chunk files
``<page>.d/chunk_NNNNN.js`` of ``page_size`` episodes each, in file order. Filters (reward range,
stop reason, env, episode / task id) run on the index; showing a page loads the chunks its episodes
are in with ``<script>`` tags, which also works from ``file://``, where ``fetch`` does not.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path
from typing import Any

from agent_rl.commands.viewer.html import CSS, JS_TOOLTIP, adv_scale_of, render_episode
from agent_rl.run.trajectories import Step, TokenTexts

PAGE_SIZE = 25  # episodes per page and per chunk file, at most
PAGE_BYTES = 1_000_000  # long episodes: fewer per page, so the first page stays near this size

PAGED_JS = """
const IDX = JSON.parse(document.getElementById('index').textContent);  // [step, eid, task, env, reward, stop, turns, tokens]
const PS = %(page_size)d, chunks = {0: JSON.parse(document.getElementById('chunk0').textContent)};
const $ = id => document.getElementById(id), waiting = new Set();
let matches = [], page = 0;
window.agentRlChunk = (k, eps) => { chunks[k] = eps; waiting.delete(k); if (!waiting.size) render(); };
function ok(r) {
  const lo = parseFloat($('minreward').value), hi = parseFloat($('maxreward').value), q = $('search').value.toLowerCase();
  return (!$('stop').value || r[5] === $('stop').value) && (!$('env').value || r[3] === $('env').value)
    && (isNaN(lo) || (r[4] !== null && r[4] >= lo)) && (isNaN(hi) || (r[4] !== null && r[4] <= hi))
    && (!q || (r[1] + ' ' + r[2]).toLowerCase().includes(q));
}
function filter() { matches = IDX.map((r, i) => i).filter(i => ok(IDX[i])); page = 0; render(); }
function render() {
  const pages = Math.max(1, Math.ceil(matches.length / PS)), shown = matches.slice(page * PS, (page + 1) * PS);
  const need = [...new Set(shown.map(i => Math.floor(i / PS)))].filter(k => !(k in chunks));
  for (const k of need) {
    if (waiting.has(k)) continue;
    waiting.add(k);
    const s = document.createElement('script');
    s.src = `${DIR}/chunk_${String(k).padStart(5, '0')}.js`;
    document.head.appendChild(s);
  }
  if (need.length) return;  // agentRlChunk renders once they are in
  $('episodes').innerHTML = shown.map(i => `<div class="where">${IDX[i][0]}</div>` + chunks[Math.floor(i / PS)][i %% PS]).join('');
  $('shown').textContent = matches.length;
  $('page').textContent = `page ${matches.length ? page + 1 : 0} / ${matches.length ? pages : 0}`;
  $('prev').disabled = page === 0;
  $('next').disabled = page >= pages - 1;
}
for (const id of ['search', 'minreward', 'maxreward']) $(id).oninput = filter;
$('stop').onchange = $('env').onchange = filter;
$('prev').onclick = () => { page--; render(); };
$('next').onclick = () => { page++; render(); };
$('mode').onchange = () => document.body.classList.toggle('adv', $('mode').value === 'advantage');
// the address keeps a view: #stop=max_turns&minreward=1&page=3 (ids of the controls, page from 1)
const wanted = new URLSearchParams(location.hash.slice(1));
for (const [k, v] of wanted) if (k !== 'page' && $(k)) $(k).value = v;
filter();
if (wanted.has('page')) { page = Math.max(0, Math.min(parseInt(wanted.get('page')) - 1, Math.ceil(matches.length / PS) - 1)); render(); }
"""


def _env_of(traj: dict[str, Any], default: str) -> str:
    info = traj.get("info") or {}
    return str(info.get("env_id") or info.get("env") or default)


def _select(element_id: str, label: str, values: list[str]) -> str:
    options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
    return f'<select id="{element_id}"><option value="">{label}</option>{options}</select>'


def _json_script(element_id: str, value: Any) -> str:
    # inside <script type="application/json"> only "</" could end the element early
    text = json.dumps(value).replace("</", "<\\/")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def write_paged(
    steps: list[Step], texts: TokenTexts, title: str, out: Path, env: str = "", page_size: int | None = None
) -> Path:
    """Write ``out`` and its chunk folder ``out.d/`` (replaced); returns ``out``. ``page_size`` None:
    ``PAGE_SIZE``, or fewer when the first episodes render to more than ``PAGE_BYTES`` a page."""
    episodes = [(s.label, t) for s in steps for t in s.trajectories]
    adv_scale = adv_scale_of([t for _, t in episodes])
    if page_size is None:
        sample = [len(render_episode(t, texts, adv_scale)) for _, t in episodes[:PAGE_SIZE]]
        page_size = max(1, min(PAGE_SIZE, PAGE_BYTES * len(sample) // max(sum(sample), 1)))
    folder = out.with_name(out.name + ".d")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    first: list[str] = []
    for k in range(0, max(len(episodes), 1), page_size):
        rendered = [render_episode(t, texts, adv_scale) for _, t in episodes[k : k + page_size]]
        if k == 0:
            first = rendered
        else:
            (folder / f"chunk_{k // page_size:05d}.js").write_text(
                f"agentRlChunk({k // page_size}, {json.dumps(rendered)});\n"
            )
    index = [
        [
            label,
            str(t.get("episode_id", "")),
            str(t.get("task_id", "")),
            _env_of(t, env),
            t.get("reward"),
            t["stop_reason"],
            len(t["turns_N"]),
            sum(t["loss_mask_T"]),
        ]
        for label, t in episodes
    ]
    stops = sorted({r[5] for r in index})
    envs = sorted({r[3] for r in index})
    controls = (
        '<input id="search" type="search" placeholder="episode / task id">'
        + _select("stop", "all stop reasons", stops)
        + _select("env", "all envs", envs)
        + '<input id="minreward" type="number" step="any" placeholder="min reward" style="width:7em">'
        '<input id="maxreward" type="number" step="any" placeholder="max reward" style="width:7em">'
        '<select id="mode"><option value="mask">colour: loss mask</option>'
        + ('<option value="advantage">colour: advantage</option>' if adv_scale > 0 else "")
        + "</select>"
        f'<button id="prev">&lt;</button><span id="page"></span><button id="next">&gt;</button> '
        f'<span><span id="shown">{len(index)}</span>/{len(index)} episodes</span>'
    )
    js = f"const DIR = {json.dumps(folder.name)};\n" + PAGED_JS % {"page_size": page_size} + JS_TOOLTIP
    out.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS} .where {{ font-size: .8em; color: #666; margin-top: .8em; }}</style></head><body>"
        f'<header class="top"><b>{html.escape(title)}</b><br>{controls}</header><div id="episodes"></div>'
        f'<div id="tip"></div>{_json_script("index", index)}{_json_script("chunk0", first)}<script>{js}</script></body></html>',
        encoding="utf-8",
    )
    return out
