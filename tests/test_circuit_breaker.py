"""The circuit breaker: a run whose infrastructure keeps failing stops, checkpointed, with a non-zero exit."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agent_rl.cli import main
from agent_rl.config import ConfigError, load_config
from agent_rl.core.types import StopReason, Trajectory
from agent_rl.rollout.backends.server import bind
from agent_rl.train.breaker import EnvErrorRateError, InfraBreaker, InfraErrorRateError
from agent_rl.train.evaluation import MAX_ERROR_SHARE
from envs.arithmetic.env import ArithmeticEnv
from tests.conftest import ROOT
from tests.learner.helpers import run, train_cmd


def episodes(n: int, failed: int, error: str = "backend: ServerUnavailableError('down')") -> list[Trajectory]:
    out = []
    for i in range(n):
        stop = StopReason.INFRA_ERROR if i < failed else StopReason.DONE
        info = {"error": f"{error} #{i}"} if i < failed else {}
        out.append(
            Trajectory(
                task_id="t",
                group_id="g",
                episode_id=f"e{i}",
                token_ids_T=[1],
                loss_mask_T=[0],
                rollout_logprobs_T=[0.0],
                turns_N=[],
                reward=None if i < failed else 1.0,
                stop_reason=stop,
                info=info,
            )
        )
    return out


def test_every_episode_failing_trips_at_once_and_names_the_component_and_first_error():
    cfg = load_config(None, ["rollout.backend.name=openai", "rollout.backend.base_url=http://127.0.0.1:9/v1"])
    breaker = InfraBreaker(cfg)
    breaker.check(0, episodes(4, 3))  # 3 of 4: under the default 1.0, first step above 0.5
    with pytest.raises(InfraErrorRateError) as info:
        breaker.check(1, episodes(4, 4))
    msg = str(info.value)
    assert msg.startswith("step 2: 4 of 4 episodes ended in an infrastructure error (trainer.max_infra_error_frac=1.0)")
    assert "the inference backend (rollout.backend.name=openai at http://127.0.0.1:9/v1)" in msg
    assert msg.endswith("failed first with: backend: ServerUnavailableError('down') #0") and "\n" not in msg


def test_more_than_half_failing_for_patience_steps_trips():
    cfg = load_config(None, ["trainer.infra_error_patience=3"])
    breaker = InfraBreaker(cfg)
    for step, failed in enumerate([3, 3, 1, 3, 3]):  # the good step (1 of 4) resets the count
        breaker.check(step, episodes(4, failed, "step: InfraError('sandbox gone')"))
    with pytest.raises(
        InfraErrorRateError,
        match=r"step 6: 3 of 4 .*more than trainer.sustained_infra_error_frac=0.5 "
        r"for trainer.infra_error_patience=3 steps in a row.*environment's infrastructure .*sandbox gone",
    ):
        breaker.check(5, episodes(4, 3, "step: InfraError('sandbox gone')"))
    relaxed = InfraBreaker(load_config(None, ["trainer.infra_error_patience=0", "trainer.max_infra_error_frac=0.9"]))
    for step in range(10):
        relaxed.check(step, episodes(10, 8))  # 80 %: never 3 in a row counted, under 0.9


def test_config_keys_are_checked():
    with pytest.raises(ConfigError, match="max_infra_error_frac"):
        load_config(None, ["trainer.max_infra_error_frac=1.5"])
    with pytest.raises(ConfigError, match="infra_error_patience"):
        load_config(None, ["trainer.infra_error_patience=-1"])


def closed_port() -> int:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_a_run_against_a_dead_backend_stops_at_its_first_step_and_resumes(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "run"
    args = [
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.path={tiny_model_dir}",
        f"run.dir={run_dir}",
        "sandbox.backend=process",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "trainer.prompts_per_step=2",
        "trainer.steps=3",
        "tracking.loggers=[]",
        "tracking.progress=false",
    ]
    dead = [
        "rollout.backend.name=openai",
        f"rollout.backend.base_url=http://127.0.0.1:{closed_port()}/v1",
        "rollout.backend.max_retries=0",
        "rollout.backend.ready_timeout_s=0",  # no wait at start: the first step meets the dead server
    ]
    r = run(train_cmd(*args, *dead))
    assert r.returncode == 3, r.stderr[-3000:]
    [line] = [x for x in r.stderr.splitlines() if x.strip()]
    assert line.startswith("error: step 1: 4 of 4 episodes ended in an infrastructure error"), line
    assert "the inference backend (rollout.backend.name=openai at http://127.0.0.1:" in line
    assert "failed first with: backend: ServerUnavailableError(" in line
    assert f"--resume {run_dir}" in line and "Traceback" not in r.stderr
    assert (run_dir / "checkpoints" / "step_000000").is_dir()

    # the checkpoint resumes: with the backend fixed, the run goes on from step 0 to its end
    r = run(train_cmd("--resume", str(run_dir), "rollout.backend.name=hf"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"resumed {run_dir} at step 0" in r.stdout


def env_errors(n: int, failed: int) -> list[Trajectory]:
    out = episodes(n, failed, "step: ZeroDivisionError('division by zero')")
    for t in out[:failed]:
        t.stop_reason = StopReason.ENV_ERROR
    return out


def test_more_than_a_quarter_of_a_steps_episodes_in_env_errors_trips_with_type_count_and_first_message():
    assert load_config(None, []).trainer.max_env_error_frac == MAX_ERROR_SHARE == 0.25  # eval's share, per step
    breaker = InfraBreaker(load_config(None, ["env.id=agent_rl/Arithmetic-v0"]))
    breaker.check(0, env_errors(8, 2))  # 2 of 8: not more than a quarter
    with pytest.raises(EnvErrorRateError) as info:
        breaker.check(1, env_errors(8, 3))
    assert str(info.value) == (
        "step 1: 3 of 8 episodes ended in an env error (more than trainer.max_env_error_frac=0.25): "
        "3 x env_error ZeroDivisionError, first: step: ZeroDivisionError('division by zero') #0; "
        "the code of env.id=agent_rl/Arithmetic-v0 raised, retrying will not help"
    )
    never = InfraBreaker(load_config(None, ["trainer.max_env_error_frac=1.0"]))
    never.check(0, env_errors(4, 4))


class TurnRewardRaises(ArithmeticEnv):
    """Arithmetic whose reward of every turn raises."""

    async def take_turn(self, text, parsed):
        raise ZeroDivisionError("the reward function divided by zero")


def test_a_training_run_whose_env_raises_stops_at_its_first_step_with_exit_3(tmp_path, tiny_model_dir, capsys):
    gym.register("test/TurnRewardRaises-v0", entry_point=TurnRewardRaises, disable_env_checker=True)
    try:
        code = main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.path={tiny_model_dir}",
                f"run.dir={tmp_path / 'run'}",
                "env.id=test/TurnRewardRaises-v0",
                "sandbox.backend=process",
                "rollout.group_size=2",
                "rollout.max_new_tokens=4",
                "trainer.prompts_per_step=2",
                "trainer.steps=2",
                "tracking.loggers=[]",
                "tracking.progress=false",
            ]
        )
    finally:
        gym.registry.pop("test/TurnRewardRaises-v0")
    err = capsys.readouterr().err
    assert code == 3
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith(
        "error: step 0: 4 of 4 episodes ended in an env error (more than trainer.max_env_error_frac=0.25): "
        "4 x env_error ZeroDivisionError, first: step: ZeroDivisionError('the reward function divided by zero'); "
        "the code of env.id=test/TurnRewardRaises-v0 raised, retrying will not help; checkpoint "
    ), line
    assert f"--resume {tmp_path / 'run'}" in line and "Traceback" not in err
    assert (tmp_path / "run" / "checkpoints" / "step_000000").is_dir()
