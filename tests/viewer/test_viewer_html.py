"""``agent-rl view``: hand-built trajectories saved the trainer's way, rendered in headless Chromium.

The DOM must hold one span per token with the trajectory's exact mask counts, the rewards and the
stop reasons; the screenshots must show the mask colours, and the advantage colours when asked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agent_rl.config import load_config
from agent_rl.core.types import StopReason, Trajectory, TrajectoryGroup, Turn
from agent_rl.rollout.groups import advantages_by_episode
from agent_rl.train.trainer import Trainer
from tests import cli_runner
from tests.conftest import ROOT, cli_env

GREEN, GREY = (183, 228, 176), (232, 232, 232)  # policy tokens, prompt / observation tokens
CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(
                "the viewer test needs Debian's chromium in CI (.ci/setup_sandbox.sh installs it)", pytrace=False
            )
        pytest.skip("no chromium here (apt-get install -y chromium)")
    return exe


def build(tok) -> list[Trajectory]:
    enc = lambda s: tok.encode(s, add_special_tokens=False)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    prompt = enc("<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n")
    obs = enc("\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    turn1, turn2 = enc(CALL) + [end], enc("<answer>42</answer>") + [end]

    def traj(eid, parts, reward, stop, info=None):
        ids, mask, turns = [], [], []
        for kind, part in parts:  # kind: P prompt, A assistant turn, O observation
            if kind == "A":
                turns.append(
                    Turn(
                        start=len(ids),
                        end=len(ids) + len(part),
                        obs_start=len(ids) + len(part),
                        obs_end=len(ids) + len(part),
                    )
                )
                turns[-1].reward, turns[-1].policy_version = (reward or 0.0) if len(turns) == 1 else 0.0, 3
            elif kind == "O":
                turns[-1].obs_end = len(ids) + len(part)
            ids += part
            mask += [int(kind == "A")] * len(part)
        lps = [-0.5 if m else 0.0 for m in mask]
        return Trajectory("task-a", "g0", eid, ids, mask, lps, turns, reward, stop, info=info or {})

    return [
        traj("ep-solved", [("P", prompt), ("A", turn1), ("O", obs), ("A", turn2)], 1.0, StopReason.DONE),
        traj("ep-wrong", [("P", prompt), ("A", enc("<answer>41</answer>") + [end])], 0.0, StopReason.MAX_TURNS),
        traj("ep-broken", [("P", prompt), ("A", turn1)], None, StopReason.INFRA_ERROR, {"error": "server died"}),
    ]


class Dom(HTMLParser):
    """Per episode: counts of mask-1 / mask-0 token spans, their data-adv values, reward and stop text."""

    def __init__(self):
        super().__init__()
        self.episodes: list[dict] = []
        self.field: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "div" and cls.split()[:1] == ["episode"]:
            self.episodes.append({"m1": 0, "m0": 0, "adv": [], "ids": [], "reward": "", "stop": "", "calls": 0})
        elif tag == "span" and cls in ("t m1", "t m0"):
            ep = self.episodes[-1]
            ep[cls[2:]] += 1
            ep["ids"].append(int(a["data-id"]))
            if "data-adv" in a:
                ep["adv"].append(float(a["data-adv"]))
        elif tag == "span" and cls in ("reward", "stop"):
            self.field = cls
        elif tag == "div" and cls == "toolcall":
            self.episodes[-1]["calls"] += 1

    def handle_data(self, data):
        if self.field:
            self.episodes[-1][self.field] += data
            self.field = None


def pixels(png) -> torch.Tensor:
    from PIL import Image

    return torch.from_numpy(np.asarray(Image.open(png).convert("RGB"), dtype=np.int32).reshape(-1, 3))


def test_view_renders_masks_advantages_rewards(tmp_path, tiny_model_dir, tiny_tokenizer, chromium):
    trajs = build(tiny_tokenizer)
    # advantages as the trainer stores them: one concat row per trained episode, padded to T
    trained = trajs[:2]
    T = max(len(t.token_ids_T) for t in trained)
    adv_BT = torch.zeros(2, T)
    for row, (t, a) in enumerate(zip(trained, [0.5, -0.5], strict=True)):
        adv_BT[row, : len(t.loss_mask_T)] = a * torch.tensor(t.loss_mask_T, dtype=torch.float32)
    advantages = advantages_by_episode([TrajectoryGroup("task-a", "g0", trained)], adv_BT)
    assert advantages["ep-solved"] == [0.5 * m for m in trajs[0].loss_mask_T]
    assert advantages["ep-wrong"] == [-0.5 * m for m in trajs[1].loss_mask_T]

    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(None, [f"model.path={tiny_model_dir}"])
    (run / "config.yaml").write_text(cfg.to_yaml())
    trainer = SimpleNamespace(cfg=cfg, run_dir=run, rank=0)
    Trainer._save_trajectories(trainer, 0, trajs, advantages)
    Trainer._save_trajectories(trainer, 1, trajs[1:2])

    out = tmp_path / "view.html"
    r = cli_runner.run(["agent-rl", "view", str(run), "--out", str(out)], ROOT, cli_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 5000

    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    parser = Dom()
    parser.feed(dom.stdout)
    expected = trajs + trajs[1:2]  # step 0: three episodes; step 1: the second again
    assert len(parser.episodes) == 4
    for ep, t in zip(parser.episodes, expected, strict=True):
        assert ep["ids"] == t.token_ids_T  # one span per token, in order
        assert ep["m1"] == sum(t.loss_mask_T) and ep["m0"] == len(t.loss_mask_T) - sum(t.loss_mask_T)
        assert ep["stop"] == str(t.stop_reason)
        assert ep["reward"] == ("none" if t.reward is None else f"{t.reward:g}")
    assert parser.episodes[0]["adv"] == advantages["ep-solved"] and parser.episodes[1]["adv"] == advantages["ep-wrong"]
    assert parser.episodes[2]["adv"] == [] and parser.episodes[3]["adv"] == []  # step 1 was saved without
    assert [ep["calls"] for ep in parser.episodes] == [1, 0, 1, 0]  # the tool call of turn 1 is listed
    assert "server died" in dom.stdout

    shots = {}
    for mode in ("mask", "advantage"):
        png = tmp_path / f"{mode}.png"
        url = out.as_uri() + ("#advantage" if mode == "advantage" else "")
        shot = subprocess.run(
            [chromium, *flags, "--window-size=1000,1400", "--hide-scrollbars", f"--screenshot={png}", url],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
        shots[mode] = pixels(png)
    mask_px = shots["mask"]
    count = lambda px, rgb: int((px == torch.tensor(rgb)).all(-1).sum())
    assert len(torch.unique(mask_px, dim=0)) > 50  # not blank: text, colours, anti-aliasing
    assert count(mask_px, GREEN) > 2000 and count(mask_px, GREY) > 5000
    adv_px = shots["advantage"]
    r_, g_, b_ = adv_px.unbind(-1)
    blue = int(((b_ - r_ > 60) & (b_ - g_ > 20)).sum())
    red = int(((r_ - b_ > 60) & (r_ - g_ > 60)).sum())
    assert blue > 1000 and red > 300  # solved episode's tokens blue (A > 0), the wrong one's red (A < 0)
    # the third episode has no advantages and keeps the mask colour in advantage mode
    assert 0 < count(adv_px, GREEN) < count(mask_px, GREEN)


def test_view_selects_steps_and_names_bad_input(tmp_path, tiny_model_dir, tiny_tokenizer):
    from agent_rl.commands.viewer import write_view

    trajs = build(tiny_tokenizer)
    bell = tiny_tokenizer.encode("\x07", add_special_tokens=False)
    trajs[1].token_ids_T[-2:-1] = bell[:1]  # a control character the model sampled
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    cfg = load_config(None, [f"model.path={tiny_model_dir}"])
    (run / "config.yaml").write_text(cfg.to_yaml())
    for step in range(3):
        Trainer._save_trajectories(SimpleNamespace(cfg=cfg, run_dir=run, rank=0), step, trajs[:2])
    (run / "trajectories" / "eval.jsonl").write_text((run / "trajectories" / "step_000001.jsonl").read_text())
    page = write_view(run, last=2).read_text()
    assert [line.split(" ·")[0] for line in page.split("<h2>")[1:]] == ["step 2", "step 3", "eval"]
    assert page.count('class="episode"') == 6
    assert "\\x07" in page and "\x07" not in page  # visible, and the page stays valid text
    with pytest.raises(ValueError, match="no such run directory"):
        write_view(tmp_path / "missing")
    (run / "trajectories" / "step_000003.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"step_000003\.jsonl:1: not JSON"):
        write_view(run)
    lonely = tmp_path / "lonely.jsonl"
    lonely.write_text((run / "trajectories" / "step_000001.jsonl").read_text())
    with pytest.raises(ValueError, match="pass --tokenizer"):
        write_view(lonely)
    assert "ep-solved" in write_view(lonely, tokenizer_path=str(tiny_model_dir)).read_text()
