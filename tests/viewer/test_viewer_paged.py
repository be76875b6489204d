"""The viewer at 10k episodes: a first page under 2 MB, pages loaded as needed, filters in the browser
(headless Chromium, as tests/viewer/test_viewer_html.py)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from agent_rl.commands.viewer import write_view
from agent_rl.core.types import StopReason, Trajectory, Turn
from tests.viewer.test_viewer_html import chromium  # noqa: F401  (the fixture)

N = 10_000


def episodes(tok) -> list[dict]:
    """N short episodes; episode i: reward i % 3 / 2, stop max_turns when i % 5 == 0, env A or B."""
    prompt = tok.encode("What is 12 + 30?", add_special_tokens=False)
    reply = tok.encode("<answer>42</answer>", add_special_tokens=False)
    ids = prompt + reply
    out = []
    for i in range(N):
        t = Trajectory(
            task_id=f"task-{i % 97}",
            group_id=f"g{i // 4}",
            episode_id=f"ep{i:05d}",
            token_ids_T=ids,
            loss_mask_T=[0] * len(prompt) + [1] * len(reply),
            rollout_logprobs_T=[0.0] * len(ids),
            turns_N=[Turn(len(prompt), len(ids), len(ids), len(ids))],
            reward=(i % 3) / 2,
            stop_reason=StopReason.MAX_TURNS if i % 5 == 0 else StopReason.DONE,
            info={"env_id": "A" if i % 2 else "B"},
        )
        out.append(t.to_json())
    return out


def _dom(chromium, page, tmp_path, fragment: str = "") -> list[str]:  # noqa: F811  (the imported fixture)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--allow-file-access-from-files",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    r = subprocess.run(
        [chromium, *flags, "--dump-dom", page.as_uri() + fragment],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    shown = re.search(r'<div id="episodes">(.*?)</div><div id="tip">', r.stdout, re.DOTALL)
    assert shown, r.stdout[-2000:]
    return re.findall(r'<b class="eid">(ep\d+)</b>', shown.group(1)), r.stdout


@pytest.mark.slow
def test_ten_thousand_episodes_page_and_filter(tmp_path, tiny_model_dir, tiny_tokenizer, chromium):  # noqa: F811
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "config.yaml").write_text(
        json.dumps({"model": {"path": str(tiny_model_dir)}, "env": {"id": "agent_rl/Arithmetic-v0"}})
    )
    eps = episodes(tiny_tokenizer)
    (run / "trajectories" / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    page = write_view(run)
    chunks = sorted((run / "trajectories.html.d").iterdir())
    assert len(chunks) == N // 25 - 1  # the first page's episodes are in the page itself
    total = page.stat().st_size + sum(c.stat().st_size for c in chunks)
    assert page.stat().st_size < 2_000_000 < total

    ids, dom = _dom(chromium, page, tmp_path)
    assert ids == [f"ep{i:05d}" for i in range(25)]  # the first page
    assert f'<span id="shown">{N}</span>' in dom and "page 1 / 400" in dom

    # reward >= 1 and stop max_turns: i % 3 == 2 and i % 5 == 0, i.e. i % 15 == 5; env A: i odd -> i % 30 == 5
    ids, dom = _dom(chromium, page, tmp_path, "#minreward=1&stop=max_turns&env=A&page=3")
    expected = [i for i in range(N) if i % 30 == 5]
    assert ids == [f"ep{i:05d}" for i in expected[50:75]]  # page 3 of the matches: chunks loaded on demand
    assert f'<span id="shown">{len(expected)}</span>' in dom and f"page 3 / {-(-len(expected) // 25)}" in dom
    ids, _ = _dom(chromium, page, tmp_path, "#search=ep09999")
    assert ids == ["ep09999"]


def test_small_runs_stay_one_page_and_page_size_is_checked(tmp_path, tiny_model_dir, tiny_tokenizer):
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    (run / "config.yaml").write_text(json.dumps({"model": {"path": str(tiny_model_dir)}}))
    (run / "trajectories" / "eval.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in episodes(tiny_tokenizer)[:30])
    )
    assert write_view(run).read_text().count('class="episode"') == 30 and not (run / "trajectories.html.d").exists()
    write_view(run, page_size=10)
    assert len(list((run / "trajectories.html.d").iterdir())) == 2
    with pytest.raises(ValueError, match="--page-size 0: must be >= 1"):
        write_view(run, page_size=0)
