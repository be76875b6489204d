"""Did each turn's sampler hold the weights of the version it records? (see README.md)

For every saved step's trajectories, the largest |logprob| difference between what the sampler
reported and what the checkpoint of the turn's ``policy_version`` (and of the versions next to it)
gives on the same tokens. Version 0 is ``--start`` (the model the run started from).

    python bench/results/async_quickstart/check_versions.py RUN_DIR --start runs/quickstart/sft_model
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="run directory (trainer.save_every=1, trajectories saved)")
    p.add_argument("--start", required=True, help="the model the run started from (version 0)")
    args = p.parse_args()
    steps = sorted(int(d.name.split("_")[1]) for d in (args.run / "checkpoints").glob("step_*"))
    models: dict[int, torch.nn.Module] = {}

    def model(version: int) -> torch.nn.Module:
        if version not in models:
            path = args.start if version == 0 else args.run / f"checkpoints/step_{version:06d}/model"
            models[version] = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        return models[version]

    for step in steps:
        worst: dict[tuple[int, int], float] = {}
        for line in open(args.run / f"trajectories/step_{step:06d}.jsonl"):
            row = json.loads(line)
            ids = torch.tensor([row["token_ids_T"]])
            for turn in row["turns_N"]:
                v = turn["policy_version"]
                for held in (v - 1, v, v + 1):
                    if held < 0 or held > steps[-1]:
                        continue
                    with torch.no_grad():
                        logits = model(held)(ids).logits[0, :-1]
                    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
                    gap = max(
                        abs(float(lp[i - 1]) - row["rollout_logprobs_T"][i]) for i in range(turn["start"], turn["end"])
                    )
                    worst[v, held] = max(worst.get((v, held), 0.0), gap)
        print(
            f"step {step}: "
            + "  ".join(f"turn v{v} vs checkpoint v{h}: {g:.2e}" for (v, h), g in sorted(worst.items()))
        )


if __name__ == "__main__":
    main()
