"""SearchQA-v0 / SearchQA-R2-v0: the knowledge base, the search tool, exact match, splits, errors,
and Search-R2's information-density reward by hand."""

from __future__ import annotations

import random

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registration)
from envs.search_qa.kb import knowledge_base, normalize
from envs.search_qa.policies import answer_text, oracle, search_text, weak_teacher
from envs.search_qa.rewards import InformationDensity, information_density


def play(env, policy, seed, split="train"):
    obs, info = env.reset(seed=seed, options={"split": split})
    messages, total, infos = list(obs), 0.0, []
    for _ in range(env.unwrapped.max_turns):
        action = policy(messages, random.Random(seed))
        obs, reward, terminated, truncated, step_info = env.step(action)
        messages += [{"role": "assistant", "content": action}, *obs]
        total += reward
        infos.append(step_info)
        if terminated or truncated:
            break
    return total, infos, info


def test_knowledge_base_is_deterministic_two_hop_and_split_without_overlap():
    kb = knowledge_base()
    assert (len(kb.docs), len(kb.questions)) == (200, 520)
    q = kb.questions[0]
    assert q.question == "In which country was Pepe Kalun born?" and q.answer == "Fagargaria" and q.evidence == (0, 147)
    assert (
        kb.docs[0].text
        == "Pepe Kalun is an engineer. Pepe Kalun was born in Taslobri. Pepe Kalun is employed by Zenpe Works."
    )
    # the first hop names the bridge, the second hop states the answer
    assert q.bridge in kb.docs[q.evidence[0]].text and q.answer in kb.docs[q.evidence[1]].text
    splits = [{x.task_id for x in kb.split(s)} for s in ("train", "val", "test")]
    assert sum(map(len, splits)) == 520 and not (
        splits[0] & splits[1] or splits[0] & splits[2] or splits[1] & splits[2]
    )
    # an entity's exact name retrieves its own document first
    assert all(kb.search(d.title, 1)[0].doc_id == d.doc_id for d in kb.docs)
    assert kb.search("zzz qqq", 3) == [] and normalize("The  Fagargaria!") == "fagargaria"


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_oracle_solves_every_question_it_meets_and_the_weak_teacher_sometimes_fails(split):
    env = gym.make("agent_rl/SearchQA-v0")
    assert [play(env, oracle, s, split)[0] for s in range(8)] == [1.0] * 8
    weak = [play(env, weak_teacher, s, split)[0] for s in range(16)]
    assert 0 < sum(weak) < 16
    env.close()


def test_search_tool_observation_retrieved_ids_and_errors():
    env = gym.make("agent_rl/SearchQA-v0", top_k=2)
    obs, info = env.reset(seed=0)
    q = knowledge_base().by_task[info["task_id"]]
    assert [t["function"]["name"] for t in info["tools"]] == ["search"]
    obs, reward, terminated, truncated, step = env.step(search_text(q.entity))
    assert obs[0]["content"].splitlines()[0].startswith(f"[doc {q.evidence[0]}] {q.entity}: ")
    assert step["retrieved"] == [q.evidence[0]] and step["evidence"] == list(
        q.evidence
    )  # a person's name is in one document
    assert (reward, terminated, step["action_valid"]) == (0.0, False, True)
    # a call to an unknown tool, a query of the wrong type, no call at all: error observations
    for action in (
        '<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>',
        "I think so",
    ):
        obs, reward, terminated, truncated, step = env.step(action)
        assert obs[-1]["content"].startswith("error: ") and step["action_valid"] is False and step["retrieved"] == []
        if truncated:
            break
    env.close()


def test_exact_match_after_normalization_only():
    env = gym.make("agent_rl/SearchQA-v0")
    _, info = env.reset(seed=3)
    q = knowledge_base().by_task[info["task_id"]]
    assert env.step(answer_text(f"the {q.answer.upper()}."))[1] == 1.0
    env.reset(seed=3)
    assert env.step(answer_text(q.answer + " River Town"))[1] == 0.0
    env.close()


def test_information_density_by_hand():
    #           evidence {0, 147}; retrieved 0 (new, useful), 5, 147 (new, useful), 0 (repeat), 9, 12
    assert information_density([0, 5, 147, 0, 9, 12], {0, 147}) == pytest.approx(2 / 6)
    assert information_density([], {0}) == 0.0
    c = InformationDensity()
    assert c.step("a", 0.0, False, {"retrieved": [0, 5, 147], "evidence": [0, 147]}) == 0.0
    assert c.step("b", 1.0, True, {"retrieved": [], "evidence": [0, 147]}) == pytest.approx(2 / 3)
    c.reset()
    c.step("a", 0.0, False, {"retrieved": [0, 5, 147], "evidence": [0, 147]})
    assert c.step("b", 0.0, True, {"retrieved": [], "evidence": [0, 147]}) == 0.0  # gated: a wrong answer earns nothing
    ungated = InformationDensity(weight=0.5, gated=False)
    ungated.step("a", 0.0, False, {"retrieved": [3, 147], "evidence": [0, 147]})
    assert ungated.step("b", 0.0, True, {"retrieved": [], "evidence": [0, 147]}) == pytest.approx(0.25)


def test_the_r2_env_adds_the_density_to_exact_match():
    env = gym.make("agent_rl/SearchQA-R2-v0", top_k=3)
    total, infos, info = play(env, oracle, 0)
    retrieved = [d for step in infos for d in step["retrieved"]]
    q = knowledge_base().by_task[info["task_id"]]
    assert retrieved[0] == q.evidence[0] and set(q.evidence) <= set(retrieved) and len(retrieved) > 2
    expected = 1.0 + information_density(retrieved, set(q.evidence))
    assert total == pytest.approx(expected) and infos[-1]["reward_components"]["information_density"] == pytest.approx(
        expected - 1.0
    )
    env.close()
