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
from agent_core.compat import parse_output
from agent_core.env import ActionRejected, Env, EnvBrokenByAgent, Obs
from agent_core.grammar import ActionParseError, format_action
from agent_core.memory import EpisodeSummary, EpisodicMemory, build_messages, episodic_prompt
from agent_core.policies.base import EpisodeContext, Policy, PolicyInput, PolicyOutput, PolicyStopped
from agent_core.prompts import system_prompt
from agent_core.tasks.runner import PreparedTask, declares_infeasible, evaluate
from agent_core.trajectory import CheckResult, EpisodeOutcome, StepRecord

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


@dataclass
class _Run:
    steps: list[StepRecord] = field(default_factory=list)
    final_answer: str = ""
    stop_reason: str = ""
    invalid_run: int = 0
    broken: str = ""
    """Why the agent's actions left the environment unusable, if they did."""


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
    cfg = config or AgentConfig()
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
    system = system_prompt(platform, language=cfg.language) if policy.wants_messages else ""
    recalled = EpisodicMemory(memory).retrieve(
        family=spec.family, instruction=prepared.instruction, k=cfg.episodic_k
    )
    episodic = episodic_prompt(recalled) if policy.wants_messages else ""
    run = _Run()
    obs = env.observe()

    def record(step: StepRecord) -> None:
        run.steps.append(step)
        if on_step is not None:
            on_step(step)

    while not run.stop_reason:
        if len(run.steps) >= max_steps:
            run.stop_reason = "max_steps"
            break
        if time.monotonic() - t0 >= max_seconds:
            run.stop_reason = "max_seconds"
            break
        if should_stop is not None and should_stop():
            run.stop_reason = "policy_stopped"
            break
        if gate is not None and gate():
            obs = env.observe()
            continue  # the budgets are checked again: the pause may have used them up
        screen = (obs.width, obs.height)
        inp = PolicyInput(
            instruction=prepared.instruction,
            observation=obs,
            step_index=len(run.steps),
            history=tuple(run.steps),
            messages=build_messages(
                system=system,
                instruction=prepared.instruction,
                observation=obs,
                history=run.steps,
                images=cfg.history_images,
                episodic=episodic,
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
            run.stop_reason = "policy_stopped"
            break
        latency_ms = int((time.monotonic() - t_think) * 1000)
        parsed = _interpret(out, policy, screen=screen, platform=platform)
        if isinstance(parsed, str):
            run.invalid_run += 1
            record(_invalid(len(run.steps), obs, out, parsed, observed_at, latency_ms))
            if run.invalid_run >= cfg.max_consecutive_invalid:
                run.stop_reason = "invalid_limit"
            continue
        thought, texts, acts, extra = parsed
        for j, action in enumerate(acts):
            if len(run.steps) >= max_steps:
                run.stop_reason = "max_steps"
                break
            step = StepRecord(
                index=len(run.steps),
                observation=obs,
                thought=thought,
                action=action,
                action_text=texts[j],
                raw_output=out.text if j == 0 else "",
                observed_at=observed_at,
                latency_ms=latency_ms if j == 0 else 0,
                token_ids=out.token_ids if j == 0 else None,
                logprobs=out.logprobs if j == 0 else None,
                info={**extra, **({"continued": True} if j else {})},
            )
            if isinstance(action, A.Finished | A.CallUser):
                record(_acted(step, None))
                run.invalid_run = 0
                if isinstance(action, A.Finished):
                    run.final_answer = action.content
                run.stop_reason = "finished" if isinstance(action, A.Finished) else "call_user"
                break
            try:
                after = env.act(action)
            except ActionRejected as exc:
                run.invalid_run += 1
                record(_acted(step, None, invalid=f"the environment rejected {action.kind}: {exc}"))
                if run.invalid_run >= cfg.max_consecutive_invalid:
                    run.stop_reason = "invalid_limit"
                break
            except EnvBrokenByAgent as exc:
                run.broken = str(exc) or type(exc).__name__
                record(_acted(step, None, invalid=f"the environment broke under the agent: {run.broken}"))
                run.stop_reason = "env_broken"
                break
            run.invalid_run = 0
            record(_acted(step, after))
            obs = after
            if after.info.get("done") is True:
                # The environment ended the episode itself (a MiniWoB task was answered): acting on
                # would start a new problem and lose the reward.
                run.stop_reason = "env_done"
                break
    check: CheckResult | None = None
    if run.broken:
        # Nothing can be read from a broken environment, and nothing there is the task done.
        detail = {"check": "environment", "score": 0.0, "error": f"broken by the agent: {run.broken}"}
        check = CheckResult(reward=0.0, details=(detail,))
    elif score:
        check = evaluate(prepared, env, final_answer=run.final_answer)
    outcome = EpisodeOutcome(
        stop_reason=run.stop_reason,
        steps=tuple(run.steps),
        final_answer=run.final_answer,
        declared_infeasible=declares_infeasible(run.final_answer),
        check=check,
        duration_s=time.monotonic() - t0,
        final_observation=None if run.broken else obs,
    )
    log.info(
        "episode %s seed=%s: %s after %d steps in %.1f s, reward %s",
        spec.id,
        prepared.seed,
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
    system = system_prompt(platform, language=cfg.language) if policy.wants_messages else ""
    inp = PolicyInput(
        instruction=prepared.instruction,
        observation=obs,
        step_index=len(history),
        history=tuple(history),
        messages=build_messages(
            system=system,
            instruction=prepared.instruction,
            observation=obs,
            history=list(history),
            images=cfg.history_images,
        )
        if policy.wants_messages
        else (),
        screen=screen,
    )
    t0 = time.monotonic()
    out = policy.act(inp)
    latency_ms = int((time.monotonic() - t0) * 1000)
    parsed = _interpret(out, policy, screen=screen, platform=platform)
    if isinstance(parsed, str):
        return Proposal(out.thought, None, "", out.text, parsed, latency_ms)
    thought, _texts, acts, _extra = parsed
    return Proposal(thought, acts[0], screen_action_text(acts[0], screen), out.text, "", latency_ms)


def _interpret(
    out: PolicyOutput, policy: Policy, *, screen: tuple[int, int], platform: str
) -> tuple[str, list[str], tuple[A.Action, ...], dict[str, str]] | str:
    """(thought, action texts, actions, extras) of a response, or the reason it is invalid."""
    if out.actions is not None:
        if not out.actions:
            return "the policy returned no action"
        # Recorded in screen pixels: the faithful form; datasets map it into a model's space later.
        texts = [screen_action_text(action, screen) for action in out.actions]
        return out.thought, texts, out.actions, {}
    try:
        parsed = parse_output(
            out.text, fmt=policy.output_format, screen=screen, coords=policy.coords, platform=platform
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
    index: int, obs: Obs, out: PolicyOutput, reason: str, observed_at: float, latency_ms: int
) -> StepRecord:
    return StepRecord(
        index=index,
        observation=obs,
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
