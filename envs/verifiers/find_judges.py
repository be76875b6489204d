"""The LLM judges a verifiers taskset's config declares, as JSON on stdout: ``{dotted path: the judge's
config}`` (a list of configs for a list of judges), e.g. ``{"task.judge": {"base_url": ..., "model": ...}}``.

Run by ``envs/verifiers/program.py`` with the verifiers venv's python, as a script (it imports nothing
of this project), when ``agent_rl/Verifiers-v0`` is made. A judge is a ``vf.JudgeConfig`` in the
taskset's config: a field that task code hands to its ``vf.Judge`` (``MyJudge(self.config.judge)``),
or the plugged ``task.judges`` (verifiers' ``reference``, ``rubric``, ``decision`` judges). A taskset
that cannot be imported exits 1 with its error on the last line of stderr.
"""

import json
import sys

from pydantic import BaseModel
from verifiers.v1.configs.judge import JudgeConfig
from verifiers.v1.utils.loaders import taskset_config_type


def judges(config: BaseModel, prefix: str = "") -> dict:
    found = {}
    for name in type(config).model_fields:
        value, path = getattr(config, name), prefix + name
        if isinstance(value, JudgeConfig):
            found[path] = value.model_dump(mode="json")
        elif isinstance(value, BaseModel):
            found |= judges(value, path + ".")
        elif isinstance(value, list | tuple) and value and all(isinstance(v, JudgeConfig) for v in value):
            found[path] = [v.model_dump(mode="json") for v in value]
    return found


if __name__ == "__main__":
    try:
        config = taskset_config_type(sys.argv[1])()
    except Exception as e:  # noqa: BLE001 - the taskset's own module may raise anything on import
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(judges(config)))
