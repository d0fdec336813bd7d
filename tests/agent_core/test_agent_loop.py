"""The ReAct loop: steps per action, invalid steps with reasons, budgets, env errors, memory in the prompt."""

from __future__ import annotations

import json

import pytest

from agent_core import actions as A
from agent_core.agent import AgentConfig, run_episode
from agent_core.env import EnvBrokenByAgent, EnvError, Obs
from agent_core.memory import EpisodeSummary
from agent_core.policies.base import PolicyOutput, make_policy
from tests.agent_core.fakes import FakeEnv, TextPolicy, prepared


def test_multi_action_response_becomes_one_step_per_action_and_the_checker_scores():
    env = FakeEnv()
    policy = TextPolicy(
        [
            "Thought: I write the file.\nAction: file_write(path='out.txt', content='hi')\n\n"
            "click(start_box='(100,200)')",
            "Thought: Done.\nAction: finished(content='wrote it')",
        ]
    )
    out = run_episode(env, policy, prepared())
    assert out.stop_reason == "finished" and out.reward == 1.0 and out.final_answer == "wrote it"
    assert [type(s.action) for s in out.steps] == [A.FileWrite, A.Click, A.Finished]
    assert env.acted == [A.FileWrite(path="out.txt", content="hi"), A.Click(x=100, y=200)]
    first, second = out.steps[0], out.steps[1]
    assert first.raw_output.startswith("Thought: I write") and second.raw_output == ""
    assert second.info.get("continued") and first.token_ids == (1, 2) and second.token_ids is None
    assert [s.index for s in out.steps] == [0, 1, 2]
    # Each step keeps the screen its actor saw before acting.
    assert out.steps[1].observation.info["n"] == 1


def test_the_outcome_keeps_the_screen_after_the_last_action():
    """A step keeps the screen before its action; the result is the screen after the last one."""
    clicks = ["Action: click(start_box='(1,1)')"] * 3
    out = run_episode(FakeEnv(), TextPolicy(clicks), prepared(), config=AgentConfig(max_steps=3))
    assert out.final_observation is not None and out.final_observation.info["n"] == 3
    finished = run_episode(FakeEnv(), TextPolicy(clicks[:2]), prepared())  # then finished()
    assert finished.stop_reason == "finished" and finished.final_observation is not None
    assert finished.final_observation.info["n"] == 2


def test_unparseable_response_is_an_invalid_step_with_its_reason_and_the_episode_goes_on():
    env = FakeEnv()
    policy = TextPolicy(["I think I should click somewhere", "Action: click(start_box='(1,1)')"])
    out = run_episode(env, policy, prepared())
    bad = out.steps[0]
    assert bad.action is None and bad.invalid_reason and bad.raw_output == "I think I should click somewhere"
    assert out.steps[1].action == A.Click(x=1, y=1)
    assert out.reward == 0.0


def test_consecutive_invalid_responses_stop_the_episode():
    out = run_episode(
        FakeEnv(), TextPolicy(["nonsense"] * 10), prepared(), config=AgentConfig(max_consecutive_invalid=3)
    )
    assert out.stop_reason == "invalid_limit" and len(out.steps) == 3
    assert all(not s.is_valid for s in out.steps)


def test_action_the_environment_rejects_is_invalid_not_an_env_error():
    text = "Action: mcp_call(server='s', tool='t', arguments='{}')"
    out = run_episode(FakeEnv(), TextPolicy([text, "Action: click(start_box='(2,2)')"]), prepared())
    assert out.steps[0].action is None and "rejected mcp_call" in out.steps[0].invalid_reason
    assert out.steps[1].action == A.Click(x=2, y=2)


def test_step_budget_and_env_error():
    clicks = ["Action: click(start_box='(1,1)')"] * 50
    out = run_episode(FakeEnv(), TextPolicy(clicks), prepared(), config=AgentConfig(max_steps=4))
    assert out.stop_reason == "max_steps" and len(out.steps) == 4
    with pytest.raises(EnvError):
        run_episode(FakeEnv(fail_after=2), TextPolicy(clicks), prepared())


class BreakingEnv(FakeEnv):
    """Reports, at its second action, that what runs in it broke it."""

    def act(self, action: A.Action) -> Obs:
        if len(self.acted) == 1:
            raise EnvBrokenByAgent("openbox was killed 11 times since the reset")
        return super().act(action)


def test_an_environment_the_agent_broke_ends_the_episode_as_its_failure_not_an_env_error():
    env = BreakingEnv()
    env.files["out.txt"] = b"hi"  # the checker would pass: it must not be asked
    clicks = ["Action: click(start_box='(1,1)')"] * 5
    out = run_episode(env, TextPolicy(clicks), prepared())
    assert out.stop_reason == "env_broken" and out.reward == 0.0 and len(out.steps) == 2
    assert "broke under the agent: openbox was killed" in out.steps[1].invalid_reason
    assert "broken by the agent" in out.check.details[0]["error"]


def test_sdk_results_are_kept_on_the_step():
    out = run_episode(FakeEnv(), TextPolicy(["Action: terminal(command='echo hi')"]), prepared())
    assert out.steps[0].info["result"] == {"exit_code": 0, "stdout": "ECHO HI"}


def test_prompt_keeps_recent_screenshots_and_older_steps_as_text_and_recalls_memory():
    policy = TextPolicy([f"Thought: step {i}\nAction: click(start_box='({i},{i})')" for i in range(6)])
    memory = [
        EpisodeSummary(
            "test/other", "test", "Write hi to out.txt please", 1.0, "Outcome: succeeded; wrote the file"
        ),
        EpisodeSummary("x/y", "x", "unrelated", 0.0, "Outcome: failed"),
    ]
    run_episode(
        FakeEnv(), policy, prepared(), config=AgentConfig(history_images=2, episodic_k=1), memory=memory
    )
    last = policy.inputs[6].messages
    images = [
        p for m in last if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url"
    ]
    assert len(images) == 3  # two recent turns + the current screen
    intro = last[1]["content"][0]["text"]
    assert "Step 1: Thought: step 0" in intro and "Step 5:" not in intro
    assert "wrote the file" in intro and "unrelated" not in intro
    assert last[0]["role"] == "system" and "finished(" in last[0]["content"]


def test_infeasible_declaration():
    task = prepared(infeasible=True)
    out = run_episode(FakeEnv(), TextPolicy(["Action: finished(content='infeasible: no such file')"]), task)
    assert out.declared_infeasible and out.reward == 1.0
    assert run_episode(FakeEnv(), make_policy("noop"), task).reward == 0.0
    feasible = prepared()
    env = FakeEnv()
    env.files["out.txt"] = b"hi"
    assert run_episode(env, TextPolicy(["Action: finished(content='Infeasible')"]), feasible).reward == 0.0
    assert run_episode(env, make_policy("noop"), feasible).reward == 1.0


def test_random_policy_is_reproducible_and_stays_on_screen():
    runs = []
    for _ in range(2):
        env = FakeEnv(width=300, height=200)
        run_episode(
            env, make_policy("random", seed=7, finish_prob=0.0), prepared(), config=AgentConfig(max_steps=30)
        )
        runs.append(env.acted)
    assert runs[0] == runs[1] and len(runs[0]) > 0
    for a in runs[0]:
        if isinstance(a, A.PointerAction):
            assert 0 <= a.x < 300 and 0 <= a.y < 200


def test_a_person_pressing_stop_ends_the_episode_without_an_error():
    import threading

    from agent_core.policies.human import HumanPolicy

    human = HumanPolicy(timeout_s=30)
    threading.Timer(0.2, human.stop).start()
    out = run_episode(FakeEnv(), human, prepared())
    assert out.stop_reason == "policy_stopped" and out.steps == ()


def test_episode_stops_when_the_environment_says_it_is_done():
    class DoneEnv(FakeEnv):
        def act(self, action):
            obs = super().act(action)
            return type(obs)(
                screenshot=obs.screenshot, width=obs.width, height=obs.height, info={"done": True}
            )

    clicks = ["Action: click(start_box='(1,1)')"] * 5
    out = run_episode(DoneEnv(), TextPolicy(clicks), prepared())
    assert out.stop_reason == "env_done" and len(out.steps) == 1


def test_oracle_think_time_is_checked():
    from agent_core.policies.base import PolicyError

    with pytest.raises(PolicyError, match="think_s"):
        make_policy("oracle", think_s=-1)


class _ServedPolicy(TextPolicy):
    """Answers as an inference server would: its base URL and model in the output's meta."""

    def __init__(self, texts, servers):  # type: ignore[no-untyped-def]
        super().__init__(texts)
        self.servers = list(servers)

    def act(self, inp):  # type: ignore[no-untyped-def]
        out = super().act(inp)
        server, model = self.servers.pop(0)
        return PolicyOutput(
            text=out.text,
            token_ids=out.token_ids,
            logprobs=out.logprobs,
            meta={"server": server, "model": model},
        )


def test_each_step_records_the_server_and_weights_that_answered_its_turn():
    policy = _ServedPolicy(
        [
            "Action: click(start_box='(1,1)')\n\nclick(start_box='(2,2)')",  # one turn, two steps
            "Action: not an action",  # an invalid step is recorded with its server too
            "Action: finished()",
        ],
        [("http://a:8000/v1", "tiny-v1"), ("http://b:8000/v1", "tiny-v1"), ("http://a:8000/v1", "tiny-v2")],
    )
    out = run_episode(FakeEnv(), policy, prepared(), score=False)
    served = [(s.info.get("server"), s.info.get("model")) for s in out.steps]
    assert served == [
        ("http://a:8000/v1", "tiny-v1"),
        ("http://a:8000/v1", "tiny-v1"),
        ("http://b:8000/v1", "tiny-v1"),
        ("http://a:8000/v1", "tiny-v2"),
    ]
    # A policy run in this process adds nothing (its weights are the episode's policy version).
    plain = run_episode(FakeEnv(), TextPolicy(["Action: click(start_box='(1,1)')"]), prepared(), score=False)
    assert all("server" not in s.info and "model" not in s.info for s in plain.steps)


def test_an_sdk_result_is_the_observation_text_of_the_next_turn():
    """The model reads what its command or tool call gave back beside the next screenshot, and later,
    once that turn is older than the images kept, in its text line."""
    policy = TextPolicy(
        [
            "Thought: I ask the shell.\nAction: terminal(command='echo secret-42')",
            "Thought: I click.\nAction: click(start_box='(1,1)')",
            "Thought: again\nAction: click(start_box='(2,2)')",
            "Thought: again\nAction: click(start_box='(3,3)')",
        ]
    )
    run_episode(FakeEnv(), policy, prepared(), config=AgentConfig(history_images=1, max_steps=4))
    after_command = policy.inputs[1].messages[-1]["content"]
    assert after_command[0] == {"type": "text", "text": "Terminal output (exit code 0):\nECHO SECRET-42"}
    assert after_command[1]["type"] == "image_url"
    # A GUI turn gives no text: the next screen comes alone.
    assert [p["type"] for p in policy.inputs[2].messages[-1]["content"]] == ["image_url"]
    # Two turns later the command's turn is text only, its output still with it.
    intro = policy.inputs[3].messages[1]["content"][0]["text"]
    assert "Step 1: Thought: I ask the shell." in intro and "ECHO SECRET-42" in intro


class _ToolCallPolicy(TextPolicy):
    output_format = "tool_calls"


def _qwen(args: dict[str, object]) -> str:
    return "<tool_call>\n" + json.dumps({"name": "computer_use", "arguments": args}) + "\n</tool_call>"


def test_the_pointer_is_carried_across_turns_for_actions_that_act_where_it_is():
    """Qwen2.5-VL's left_click_drag names only its end, a scroll or click without coordinates acts where
    the pointer is: where the last turn left it (a sandbox that does not report its pointer), or where
    the sandbox says it is."""
    env = FakeEnv()
    turns = [
        _qwen({"action": "mouse_move", "coordinate": [100, 200]}),
        _qwen({"action": "left_click_drag", "coordinate": [300, 400]}),
        _qwen({"action": "scroll", "pixels": -2}),
        _qwen({"action": "middle_click"}),
    ]
    out = run_episode(env, _ToolCallPolicy(turns), prepared(), config=AgentConfig(max_steps=4))
    assert [s.invalid_reason for s in out.steps] == [""] * 4
    assert env.acted == [
        A.Hover(x=100, y=200),
        A.Drag(x1=100, y1=200, x2=300, y2=400),
        A.Scroll(x=300, y=400, direction="down", amount=2),
        A.MiddleSingle(x=300, y=400),
    ]


class _PointerEnv(FakeEnv):
    """Reports its pointer with each screenshot, as the X desktop does (someone else moved it)."""

    def observe(self) -> Obs:
        obs = super().observe()
        return Obs(
            screenshot=obs.screenshot, width=obs.width, height=obs.height, info={"pointer": [640, 360]}
        )

    def act(self, action: A.Action) -> Obs:
        obs = super().act(action)
        return Obs(screenshot=obs.screenshot, width=obs.width, height=obs.height, info={"pointer": [5, 6]})


def test_the_pointer_the_sandbox_reports_wins_and_an_unplaced_pointer_is_an_invalid_step():
    env = _PointerEnv()
    turns = [_qwen({"action": "left_click_drag", "coordinate": [10, 10]}), _qwen({"action": "left_click"})]
    out = run_episode(env, _ToolCallPolicy(turns), prepared(), config=AgentConfig(max_steps=2))
    assert env.acted == [A.Drag(x1=640, y1=360, x2=10, y2=10), A.Click(x=5, y=6)]
    # First turn, and a sandbox that does not say: nothing to drag from, an invalid step with its reason.
    out = run_episode(FakeEnv(), _ToolCallPolicy(turns[:1]), prepared(), config=AgentConfig(max_steps=1))
    assert out.steps[0].action is None and "start_coordinate" in out.steps[0].invalid_reason


class _StampedPolicy(TextPolicy):
    """Gives the prompt's token ids, as the local policy and vLLM do."""

    def act(self, inp):  # type: ignore[no-untyped-def]
        out = super().act(inp)
        return PolicyOutput(
            text=out.text, token_ids=out.token_ids, logprobs=out.logprobs, prompt_token_ids=(7, 8, 9)
        )


def test_a_turns_first_step_keeps_the_stamp_of_the_prompt_its_policy_read():
    from agent_core.data.trajectory import prompt_stamp, same_prompt
    from agent_core.training.episodes import rl_episode

    turns = ["Action: click(start_box='(1,1)')\n\nclick(start_box='(2,2)')", "Action: finished()"]
    out = run_episode(FakeEnv(), _StampedPolicy(turns), prepared())
    first, second, last = out.steps
    stamp = {**prompt_stamp((7, 8, 9)), "family": "platform", "coords": "absolute"}
    assert first.info["prompt"] == stamp and "prompt" not in second.info
    assert same_prompt(first.info["prompt"], [7, 8, 9]) and not same_prompt(first.info["prompt"], [7, 8])
    assert "prompt" in last.info
    episode = rl_episode("t", 0, 1.0, "Write hi", "desktop", out.steps, policy_version=0)
    assert [(t.index, t.prompt) for t in episode.turns] == [
        (0, first.info["prompt"]),
        (1, last.info["prompt"]),
    ]


class _QwenPolicy(_StampedPolicy):
    prompt = "qwen2.5-vl"
    output_format = "tool_calls"
    coords = "smart_resize:3136:12845056"


def test_the_trainer_rebuilds_each_turn_in_the_prompt_family_and_space_it_was_written_in():
    from agent_core.training.episodes import rl_episode

    turns = [
        _qwen({"action": "left_click", "coordinate": [10, 20]}),
        _qwen({"action": "terminate", "status": "success"}),
    ]
    policy = _QwenPolicy(turns)
    out = run_episode(FakeEnv(), policy, prepared())
    assert [s.info["prompt"]["family"] for s in out.steps] == ["qwen2.5-vl"] * 2
    assert "You are a helpful assistant." in str(policy.inputs[0].messages[0]["content"])
    episode = rl_episode("t", 0, 1.0, prepared().instruction, "desktop", out.steps, policy_version=0)
    assert [list(t.messages) for t in episode.turns] == [list(inp.messages) for inp in policy.inputs]
