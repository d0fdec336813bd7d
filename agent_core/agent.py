"""The agent loop (ReAct: think, act, observe) over one prepared task.

Each policy response becomes one step per action it holds; a response that does not parse, or an
action the environment rejects, becomes an invalid step with its reason (the episode goes on, up
to a limit of consecutive invalid responses). An action after which the environment reports that
the agent broke it (`EnvBrokenByAgent`) ends the episode as a failure scored 0 (stop reason
`env_broken`). `EnvError` and `PolicyError` propagate: they are infrastructure failures, which the
caller records as env_error and re-runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent_core import actions as A
from agent_core.actions.compat import parse_output
from agent_core.actions.grammar import ActionParseError, format_action
from agent_core.data.trajectory import CheckResult, EpisodeOutcome, StepRecord
from agent_core.env import ActionRejected, Env, EnvBrokenByAgent, Obs
from agent_core.memory import EpisodeSummary, EpisodicMemory, episodic_prompt
from agent_core.policies.base import EpisodeContext, Policy, PolicyInput, PolicyOutput, PolicyStopped
from agent_core.prompt_families import check_family, family_messages
from agent_core.tasks.runner import PreparedTask, declares_infeasible, evaluate
from agent_core.turns import sampled, sandbox_pointer, served_by

log = logging.getLogger(__name__)
# The action space a task platform takes (Android sandboxes take the mobile one).
ACTION_PLATFORM = {"desktop": "desktop", "browser": "browser", "android": "mobile"}

StepSink = Callable[[StepRecord], None]


@dataclass(frozen=True)
class AgentConfig:
    """How the loop runs; the task's own limits apply when these are None."""

    max_steps: int | None = None
    """Step budget (every recorded step counts, invalid ones too)."""
    max_seconds: float | None = None
    """Wall-clock budget, checked before each policy call."""
    history_images: int = 3
    """Working memory: how many recent turns keep their screenshots in the prompt."""
    max_consecutive_invalid: int = 3
    """Stop after this many invalid responses in a row."""
    episodic_k: int = 3
    """How many earlier episodes' summaries go into the prompt."""
    language: str = "English"


_Interpretation = tuple[str, list[str], tuple[A.Action, ...], dict[str, str]]
"""(thought, action texts, actions, extras) of a response that holds actions."""


@dataclass
class _Episode:
    """One episode under way: what it runs with, then what it has done so far."""

    env: Env
    policy: Policy
    prepared: PreparedTask
    cfg: AgentConfig
    max_steps: int
    max_seconds: float
    platform: str
    """The action space (see ACTION_PLATFORM)."""
    t0: float
    episodic: str
    on_step: StepSink | None
    obs: Obs
    """The screen as it is now: what the policy sees next."""
    steps: list[StepRecord] = field(default_factory=list)
    final_answer: str = ""
    stop_reason: str = ""
    invalid_run: int = 0
    broken: str = ""
    """Why the agent's actions left the environment unusable, if they did."""

    def record(self, step: StepRecord) -> None:
        """Keep `step` and hand it to the caller's sink."""
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)


@dataclass(frozen=True)
class _Turn:
    """What the policy answered on one screen: its output, read as actions or as why it is invalid."""

    out: PolicyOutput
    parsed: _Interpretation | str
    observed_at: float
    latency_ms: int


def run_episode(
    env: Env,
    policy: Policy,
    prepared: PreparedTask,
    *,
    config: AgentConfig | None = None,
    memory: Sequence[EpisodeSummary] = (),
    on_step: StepSink | None = None,
    score: bool = True,
    should_stop: Callable[[], bool] | None = None,
    gate: Callable[[], bool] | None = None,
) -> EpisodeOutcome:
    """Run `policy` on `prepared` in `env` until it finishes or a budget runs out; score the end state.

    `gate`, called before each policy turn, may block while a person has taken control of the
    sandbox; it returns True when the screen may have changed meanwhile (the loop observes again).
    """
    ep = _start(env, policy, prepared, config or AgentConfig(), memory, on_step)
    while not ep.stop_reason:
        ep.stop_reason = _budget_spent(ep, should_stop)
        if ep.stop_reason:
            break
        if gate is not None and gate():
            ep.obs = env.observe()
            continue  # the budgets are checked again: the pause may have used them up
        turn = _decide(ep)
        if turn is None:
            break
        _act(ep, turn)
    return _outcome(ep, _score(ep, score))


def _start(
    env: Env,
    policy: Policy,
    prepared: PreparedTask,
    cfg: AgentConfig,
    memory: Sequence[EpisodeSummary],
    on_step: StepSink | None,
) -> _Episode:
    """Reset the policy for the task, write its prompts (with recalled episodes), take the first look."""
    spec = prepared.spec
    max_steps = cfg.max_steps or spec.limits.max_steps
    max_seconds = cfg.max_seconds or spec.limits.max_seconds
    platform = ACTION_PLATFORM.get(spec.platform, "desktop")
    t0 = time.monotonic()
    policy.reset(
        EpisodeContext(
            task_id=spec.id,
            instruction=prepared.instruction,
            platform=spec.platform,
            seed=prepared.seed,
            params=prepared.params,
            setup=prepared.setup,
            env=env if policy.privileged else None,
        )
    )
    if policy.wants_messages:  # a prompt family with no place for the task's MCP tools refuses them now
        check_family(policy.prompt, platform=platform, tools=prepared.tools)
    recalled = EpisodicMemory(memory).retrieve(
        family=spec.family, instruction=prepared.instruction, k=cfg.episodic_k
    )
    episodic = episodic_prompt(recalled) if policy.wants_messages else ""
    return _Episode(
        env=env,
        policy=policy,
        prepared=prepared,
        cfg=cfg,
        max_steps=max_steps,
        max_seconds=max_seconds,
        platform=platform,
        t0=t0,
        episodic=episodic,
        on_step=on_step,
        obs=env.observe(),
    )


def _budget_spent(ep: _Episode, should_stop: Callable[[], bool] | None) -> str:
    """The stop reason when a budget has run out or the caller asks to stop; "" to go on."""
    if len(ep.steps) >= ep.max_steps:
        return "max_steps"
    if time.monotonic() - ep.t0 >= ep.max_seconds:
        return "max_seconds"
    if should_stop is not None and should_stop():
        return "policy_stopped"
    return ""


def _decide(ep: _Episode) -> _Turn | None:
    """Ask the policy what to do on the current screen; None when it was stopped meanwhile."""
    obs, policy, prepared = ep.obs, ep.policy, ep.prepared
    screen = (obs.width, obs.height)
    inp = PolicyInput(
        instruction=prepared.instruction,
        observation=obs,
        step_index=len(ep.steps),
        history=tuple(ep.steps),
        messages=family_messages(
            policy.prompt,
            platform=ep.platform,
            instruction=prepared.instruction,
            observation=obs,
            history=ep.steps,
            images=ep.cfg.history_images,
            episodic=ep.episodic,
            language=ep.cfg.language,
            coords=policy.coords,
            tools=prepared.tools,
        )
        if policy.wants_messages
        else (),
        screen=screen,
    )
    observed_at = time.time()
    t_think = time.monotonic()
    try:
        out = policy.act(inp)
    except PolicyStopped:
        ep.stop_reason = "policy_stopped"
        return None
    latency_ms = int((time.monotonic() - t_think) * 1000)
    parsed = _interpret(
        out, policy, screen=screen, platform=ep.platform, pointer=sandbox_pointer(obs, ep.steps)
    )
    return _Turn(out=out, parsed=parsed, observed_at=observed_at, latency_ms=latency_ms)


def _act(ep: _Episode, turn: _Turn) -> None:
    """Record a turn: one invalid step, or one step per action, acting until one ends the turn."""
    out = turn.out
    if isinstance(turn.parsed, str):
        ep.invalid_run += 1
        ep.record(_invalid(len(ep.steps), ep, out, turn.parsed, turn.observed_at, turn.latency_ms))
        if ep.invalid_run >= ep.cfg.max_consecutive_invalid:
            ep.stop_reason = "invalid_limit"
        return
    thought, texts, acts, extra = turn.parsed
    for j, action in enumerate(acts):
        if len(ep.steps) >= ep.max_steps:
            ep.stop_reason = "max_steps"
            return
        step = StepRecord(
            index=len(ep.steps),
            observation=ep.obs,
            thought=thought,
            action=action,
            action_text=texts[j],
            raw_output=out.text if j == 0 else "",
            observed_at=turn.observed_at,
            latency_ms=turn.latency_ms if j == 0 else 0,
            token_ids=out.token_ids if j == 0 else None,
            logprobs=out.logprobs if j == 0 else None,
            info={**extra, **(sampled(out, ep.policy) if j == 0 else {**served_by(out), "continued": True})},
        )
        if not _act_one(ep, step, action):
            return


def _act_one(ep: _Episode, step: StepRecord, action: A.Action) -> bool:
    """Carry out one action and record its step; whether the turn's next action may follow."""
    if isinstance(action, A.Finished | A.CallUser):
        ep.record(_acted(step, None))
        ep.invalid_run = 0
        if isinstance(action, A.Finished):
            ep.final_answer = action.content
        ep.stop_reason = "finished" if isinstance(action, A.Finished) else "call_user"
        return False
    try:
        after = ep.env.act(action)
    except ActionRejected as exc:
        ep.invalid_run += 1
        ep.record(_acted(step, None, invalid=f"the environment rejected {action.kind}: {exc}"))
        if ep.invalid_run >= ep.cfg.max_consecutive_invalid:
            ep.stop_reason = "invalid_limit"
        return False
    except EnvBrokenByAgent as exc:
        ep.broken = str(exc) or type(exc).__name__
        ep.record(_acted(step, None, invalid=f"the environment broke under the agent: {ep.broken}"))
        ep.stop_reason = "env_broken"
        return False
    ep.invalid_run = 0
    ep.record(_acted(step, after))
    ep.obs = after
    if after.info.get("done") is True:
        # The environment ended the episode itself (a MiniWoB task was answered): acting on
        # would start a new problem and lose the reward.
        ep.stop_reason = "env_done"
        return False
    return True


def _score(ep: _Episode, score: bool) -> CheckResult | None:
    """The checker's result on the end state (none when not asked for; 0 when the agent broke it)."""
    if ep.broken:
        # Nothing can be read from a broken environment, and nothing there is the task done.
        detail = {"check": "environment", "score": 0.0, "error": f"broken by the agent: {ep.broken}"}
        return CheckResult(reward=0.0, details=(detail,))
    if score:
        return evaluate(ep.prepared, ep.env, final_answer=ep.final_answer)
    return None


def _outcome(ep: _Episode, check: CheckResult | None) -> EpisodeOutcome:
    """The episode's outcome, logged in one line."""
    outcome = EpisodeOutcome(
        stop_reason=ep.stop_reason,
        steps=tuple(ep.steps),
        final_answer=ep.final_answer,
        declared_infeasible=declares_infeasible(ep.final_answer),
        check=check,
        duration_s=time.monotonic() - ep.t0,
        final_observation=None if ep.broken else ep.obs,
    )
    log.info(
        "episode %s seed=%s: %s after %d steps in %.1f s, reward %s",
        ep.prepared.spec.id,
        ep.prepared.seed,
        outcome.stop_reason,
        len(outcome.steps),
        outcome.duration_s,
        outcome.reward,
    )
    return outcome


@dataclass(frozen=True)
class Proposal:
    """One suggested step for interactive annotation: the policy's thought and first action."""

    thought: str
    action: A.Action | None
    action_text: str
    raw_output: str
    invalid_reason: str
    latency_ms: int


def propose_step(
    policy: Policy,
    prepared: PreparedTask,
    obs: Obs,
    *,
    history: Sequence[StepRecord] = (),
    config: AgentConfig | None = None,
) -> Proposal:
    """Ask `policy` what it would do on `obs` (after `history`), without acting.

    The caller has reset the policy for the episode. The action text is written in screen pixels,
    the form a person edits and the sandbox executes.
    """
    cfg = config or AgentConfig()
    platform = ACTION_PLATFORM.get(prepared.spec.platform, "desktop")
    screen = (obs.width, obs.height)
    inp = PolicyInput(
        instruction=prepared.instruction,
        observation=obs,
        step_index=len(history),
        history=tuple(history),
        messages=family_messages(
            policy.prompt,
            platform=platform,
            instruction=prepared.instruction,
            observation=obs,
            history=list(history),
            images=cfg.history_images,
            language=cfg.language,
            coords=policy.coords,
            tools=prepared.tools,  # the sandbox's MCP tools the task uses (none for most tasks)
        )
        if policy.wants_messages
        else (),
        screen=screen,
    )
    t0 = time.monotonic()
    out = policy.act(inp)
    latency_ms = int((time.monotonic() - t0) * 1000)
    parsed = _interpret(out, policy, screen=screen, platform=platform, pointer=sandbox_pointer(obs, history))
    if isinstance(parsed, str):
        return Proposal(out.thought, None, "", out.text, parsed, latency_ms)
    thought, _texts, acts, _extra = parsed
    return Proposal(thought, acts[0], screen_action_text(acts[0], screen), out.text, "", latency_ms)


def _interpret(
    out: PolicyOutput,
    policy: Policy,
    *,
    screen: tuple[int, int],
    platform: str,
    pointer: tuple[int, int] | None = None,
) -> _Interpretation | str:
    """(thought, action texts, actions, extras) of a response, or the reason it is invalid; `pointer`
    is where the sandbox's pointer is (see `sandbox_pointer`)."""
    if out.actions is not None:
        if not out.actions:
            return "the policy returned no action"
        # Recorded in screen pixels: the faithful form; datasets map it into a model's space later.
        texts = [screen_action_text(action, screen) for action in out.actions]
        return out.thought, texts, out.actions, {}
    try:
        parsed = parse_output(
            out.text,
            fmt=policy.output_format,
            screen=screen,
            coords=policy.coords,
            platform=platform,
            pointer=pointer,
        )
    except ActionParseError as exc:
        return exc.reason or str(exc)
    if not parsed.actions:
        return "the response holds no action"
    extra = {}
    if parsed.reflection:
        extra["reflection"] = parsed.reflection
    if parsed.action_summary:
        extra["action_summary"] = parsed.action_summary
    return parsed.thought, list(parsed.action_texts), parsed.actions, extra


def screen_action_text(action: A.Action, screen: tuple[int, int]) -> str:
    """An action's UI-TARS text in screen pixels (its JSON form where the grammar cannot write it)."""
    try:
        return format_action(action, screen=screen, coords="absolute")
    except ValueError:  # a form the grammar cannot write back faithfully: keep the JSON form
        return json.dumps(A.action_to_dict(action), ensure_ascii=False)


def _invalid(
    index: int, ep: _Episode, out: PolicyOutput, reason: str, observed_at: float, latency_ms: int
) -> StepRecord:
    return StepRecord(
        index=index,
        observation=ep.obs,
        thought=out.thought,
        action=None,
        action_text="",
        raw_output=out.text,
        invalid_reason=reason,
        observed_at=observed_at,
        acted_at=time.time(),
        latency_ms=latency_ms,
        token_ids=out.token_ids,
        logprobs=out.logprobs,
        info=sampled(out, ep.policy),
    )


def _acted(step: StepRecord, after: Obs | None, *, invalid: str = "") -> StepRecord:
    info = dict(step.info)
    if after is not None and "result" in after.info:
        info["result"] = after.info["result"]
    return StepRecord(
        index=step.index,
        observation=step.observation,
        thought=step.thought,
        action=None if invalid else step.action,
        action_text=step.action_text,
        raw_output=step.raw_output,
        invalid_reason=invalid,
        observed_at=step.observed_at,
        acted_at=time.time(),
        latency_ms=step.latency_ms,
        token_ids=step.token_ids,
        logprobs=step.logprobs,
        info=info,
    )
