"""One person's live session on a running episode: their input becomes recorded steps.

Raw browser events are merged into actions (agent_core.data.recording): each action is forwarded to
the sandbox at once, and the step is recorded with the screen captured *before* its first event,
the merged action, the thought typed for it, and the model's proposal if one was pending. In
interactive mode the episode's policy proposes a step on the live screen; the person accepts it,
edits its text, or simply acts (an override). The same session serves a person who took control
of an agent rollout. Everything here is synchronous: the WebSocket consumer runs it on one thread.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from agent_core.actions import Action, ActionError, Finished, McpCall, action_to_dict
from agent_core.actions.grammar import ActionParseError, parse_edited_action
from agent_core.agent import ACTION_PLATFORM, Proposal, propose_step, screen_action_text
from agent_core.data.recording import Commit, EventMerger, Execute, MergeOp, RawEvent, RecordingError, Start
from agent_core.data.trajectory import StepRecord
from agent_core.env import ActionRejected, EnvError, Obs
from agent_core.policies.base import EpisodeContext, Policy, PolicyError
from sandbox_workers.agent_env import A11yMode, SandboxEnv
from sandbox_workers.base import ActionUnsupported, OperationUnsupported, SandboxError
from webapp.annotation.services import DemoError, demo_env, demo_renew, demo_submit, prepared_of
from webapp.episodes.models import Actor, Episode, Source
from webapp.episodes.services import step_record
from webapp.sandboxes.control import control_held_by

log = logging.getLogger(__name__)
GAME_CLOCKS: dict[str, dict[str, Any]] = {
    "step": {"paused": True},  # the game stands still between inputs; each costs it one step
    "realtime": {"paused": False, "rate": 1.0},
    "half": {"paused": False, "rate": 0.5},  # slowed for a person
}
"""A game's clock while a person plays (the browser sandbox's game_clock operation)."""


class ToolsUnavailable(DemoError):
    """The sandbox's MCP servers cannot start: the Tools panel says why; the demonstration goes on."""


@dataclass
class _Open:
    """The step in progress: the screen before it, and when that was taken."""

    obs: Obs
    observed_at: datetime
    executed: list[str] = field(default_factory=list)


class LiveSession:
    """Turns one user's input on one running episode into actions and recorded steps."""

    def __init__(self, *, episode_id: int, user: AbstractBaseUser) -> None:
        self.episode = Episode.objects.select_related("task", "policy_version", "sandbox").get(pk=episode_id)
        self.user = user
        self.platform = ACTION_PLATFORM.get(self.episode.task.platform, "desktop")
        self._env: SandboxEnv | None = None
        self._act_env: SandboxEnv | None = None
        self._merger: EventMerger | None = None
        self._open: _Open | None = None
        self.thought = ""
        self.paused_at: float | None = None
        self._gap_s = 0.0
        self._policy: Policy | None = None
        self.proposal: Proposal | None = None
        self._proposal_obs: Obs | None = None
        self._history: list[StepRecord] = []
        self.last_result: dict[str, Any] | None = None
        """What the last SDK action (a tool call, a command) gave back, for the page."""
        self.clock = "step"
        """How a game's time runs (GAME_CLOCKS); kept on each step recorded under another choice."""

    # --- plumbing -------------------------------------------------------------------------------

    @property
    def env(self) -> SandboxEnv:
        if self._env is None:
            self._env = demo_env(episode=self.episode, a11y=self._observation())
        return self._env

    def _observation(self) -> A11yMode:
        """An interactive episode observes as its policy's rollouts do (the "elements" text of a page, an
        accessibility tree), so the policy proposes from what it was trained on and the recorded steps
        train it the same way; a person's own demonstration keeps the screenshot alone."""
        version = self.episode.policy_version
        if version is None or self.episode.source == Source.HUMAN:
            return False
        from webapp.policies.runtime import observation_for

        try:
            return observation_for(version)
        except PolicyError:
            return False  # propose() names the policy's problem

    @property
    def merger(self) -> EventMerger:
        if self._merger is None:
            obs = self.env.observe()
            self._merger = EventMerger(platform=self.platform, screen=(obs.width, obs.height))
        return self._merger

    def _check_running(self) -> None:
        self.episode.refresh_from_db(fields=["status", "source", "annotator", "sandbox"])
        if self.episode.status != Episode.Status.RUNNING:
            raise DemoError(f"the episode is {self.episode.status}")

    def _check_control(self) -> None:
        if self.episode.sandbox_id is None or not control_held_by(
            sandbox_id=self.episode.sandbox_id, user=self.user
        ):
            raise DemoError("you do not hold control of this sandbox: ask for it first")

    @property
    def busy(self) -> bool:
        """Whether a step is in progress (the consumer then ticks the merger)."""
        return self._merger is not None and self._merger.open

    # --- input ----------------------------------------------------------------------------------

    def input(self, events: list[dict[str, Any]], *, offset: float = 0.0) -> None:
        """Apply a batch of raw browser events (`t` in the browser's clock, shifted by `offset`)."""
        parsed = []
        for raw in events:
            try:
                ev = RawEvent.from_json(raw)
                parsed.append(dataclasses.replace(ev, t=max(0.0, ev.t + offset)))
            except RecordingError as exc:
                raise DemoError(f"bad input event: {exc}") from None
        self._check_running()
        self._check_control()
        if self.paused_at is not None:
            # Input that reached the sandbox unrecorded would put an outcome in the episode that its
            # steps do not explain: while recording is paused, nothing is sent either.
            raise DemoError("recording is paused: resume to act (input is not sent while paused)")
        for ev in parsed:
            self._apply(self.merger.feed(ev))

    def tick(self, now: float) -> None:
        """Commit a step whose merge window has passed (a click not followed by a second one)."""
        if self._merger is not None and self._merger.open:
            self._apply(self._merger.tick(now))

    def flush(self) -> None:
        """Commit whatever step is open (before submit, pause, proposal, disconnect)."""
        if self._merger is not None:
            self._apply(self._merger.flush())

    def _apply(self, ops: list[MergeOp]) -> None:
        for op in ops:
            if isinstance(op, Start):
                self._open = _Open(obs=self.env.observe(), observed_at=timezone.now())
            elif isinstance(op, Execute):
                self._execute(op.action)
            elif isinstance(op, Commit):
                opened, self._open = self._open, None
                if opened is not None and self.paused_at is None:
                    self._record(
                        opened,
                        op.action,
                        actor=Actor.HUMAN,
                        info={"events": op.events},
                        latency_s=op.ended - op.started,
                    )

    def _execute(self, action: Action) -> dict[str, Any] | None:
        """Carry out `action`; an SDK action's result (an MCP tool's, a terminal's), None for GUI input."""
        # The screen after an action is not kept (the next step captures its own, as PNG): ask for a
        # small JPEG so forwarding each keystroke stays cheap.
        if self._act_env is None:
            self._act_env = SandboxEnv(self.env.target, platform=self.env.platform, fmt="jpeg", quality=30)
        try:
            after = self._act_env.act(action)
        except ActionRejected as exc:
            raise DemoError(f"the sandbox refused {action.kind}: {exc}") from None
        result = after.info.get("result")
        return dict(result) if isinstance(result, dict) else None

    def _record(
        self,
        opened: _Open,
        action: Action,
        *,
        actor: str,
        info: dict[str, Any] | None = None,
        latency_s: float | None = None,
        thought: str | None = None,
    ) -> None:
        obs = opened.obs
        screen = (obs.width, obs.height)
        extra = dict(info or {})
        if self.clock != "step":
            extra["game_clock"] = self.clock
        if self._gap_s:
            extra["paused_before_s"] = round(self._gap_s, 1)
            self._gap_s = 0.0
        proposal = self.proposal
        if self.episode.source == Source.AGENT:
            # A person took over an agent rollout: the episode now has both actors.
            Episode.objects.filter(pk=self.episode.pk).update(source=Source.MIXED, annotator=self.user)
            self.episode.source = Source.MIXED
        action_text = screen_action_text(action, screen)
        step = step_record(
            episode=self.episode,
            actor=actor,
            action=action_to_dict(action),
            action_text=action_text,
            thought=thought if thought is not None else self.thought.strip(),
            screenshot_png=obs.screenshot,
            a11y_tree=obs.a11y,
            screenshot_ext="jpg" if obs.mime == "image/jpeg" else "png",
            screen_size=screen,
            proposed_thought=proposal.thought if proposal else "",
            proposed_action=action_to_dict(proposal.action) if proposal and proposal.action else None,
            proposed_action_text=proposal.action_text if proposal else "",
            info=extra,
            observed_at=opened.observed_at,
            acted_at=timezone.now(),
            latency_ms=int(latency_s * 1000) if latency_s is not None else None,
        )
        self._history.append(
            StepRecord(
                index=step.index,
                observation=obs,
                thought=step.thought,
                action=action,
                action_text=action_text,
                observed_at=opened.observed_at.timestamp(),
                info=extra,
            )
        )
        self.thought = ""
        self.proposal, self._proposal_obs = None, None

    # --- think-aloud and pauses -----------------------------------------------------------------

    def set_thought(self, text: str) -> None:
        """The think-aloud text for the next step."""
        self.thought = text[:10000]

    def pause(self) -> None:
        """Stop recording (a moment to think or talk): input is refused until `resume`, so nothing
        reaches the sandbox unrecorded."""
        self.flush()
        if self.paused_at is None:
            self.paused_at = time.monotonic()

    def resume(self) -> None:
        if self.paused_at is not None:
            self.flush()  # a step begun while paused is not recorded
            self._gap_s += time.monotonic() - self.paused_at
            self.paused_at = None

    # --- interactive annotation -----------------------------------------------------------------

    def propose(self) -> dict[str, Any]:
        """The policy's suggestion on the current screen (drawn on the live view)."""
        self._check_running()
        self._check_control()
        version = self.episode.policy_version
        if version is None:
            raise DemoError("this episode has no policy to propose steps (start an interactive one)")
        self.flush()
        if self._policy is None:
            from webapp.policies.runtime import observation_for, policy_for

            prepared = prepared_of(self.episode)
            try:
                observation_for(version)
                policy = policy_for(version)
            except PolicyError as exc:
                raise DemoError(f"policy {version.name}: {exc}") from None
            policy.reset(
                EpisodeContext(
                    task_id=prepared.spec.id,
                    instruction=prepared.instruction,
                    platform=prepared.spec.platform,
                    seed=prepared.seed,
                    params=prepared.params,
                    setup=prepared.setup,
                    env=self.env if policy.privileged else None,
                )
            )
            self._policy = policy
        obs = self.env.observe()
        try:
            proposal = propose_step(self._policy, prepared_of(self.episode), obs, history=self._history)
        except PolicyError as exc:
            raise DemoError(f"the policy failed: {exc}") from None
        self.proposal, self._proposal_obs = proposal, obs
        return proposal_json(proposal)

    def accept(self) -> Episode | None:
        """Carry out the pending proposal as it is (the step's actor is the agent). A proposed
        `finished()` ends the demonstration (`finish`): the episode, submitted, is returned."""
        proposal, obs = self.proposal, self._proposal_obs
        if proposal is None or obs is None or proposal.action is None:
            raise DemoError("there is no valid proposal to accept")
        if isinstance(proposal.action, Finished):
            return self.finish(proposal.action, obs, actor=Actor.AGENT, thought=proposal.thought)
        self._carry_out(proposal.action, obs, actor=Actor.AGENT, thought=proposal.thought)
        return None

    def edit(self, text: str) -> Episode | None:
        """Carry out an edited action (UI-TARS text, screen pixels); the proposal stays on the step.
        An edited `finished()` ends the demonstration as an accepted one does (the episode is returned)."""
        self._check_running()
        self._check_control()
        self.flush()
        obs = self._proposal_obs or self.env.observe()
        try:
            parsed = parse_edited_action(text, screen=(obs.width, obs.height), platform=self.platform)
        except ActionParseError as exc:
            raise DemoError(f"the action does not parse: {exc.reason or exc}") from None
        if len(parsed.actions) != 1:
            raise DemoError("write exactly one action")
        action = parsed.actions[0]
        if isinstance(action, Finished):
            return self.finish(action, obs, actor=Actor.HUMAN, thought=parsed.thought or None)
        self._carry_out(action, obs, actor=Actor.HUMAN, thought=parsed.thought or None)
        return None

    def finish(self, action: Finished, obs: Obs, *, actor: str, thought: str | None) -> Episode:
        """End the demonstration with `finished()` as its last step (the final action a policy learns to
        take, kept like any other), then score it with the action's content as the answer."""
        self._check_running()
        self._check_control()
        self.flush()  # what was begun before it comes first
        opened = _Open(obs=obs, observed_at=timezone.now())
        typed = self.thought.strip()
        self._record(opened, action, actor=actor, latency_s=0.0, thought=typed or thought or "")
        return demo_submit(episode=self.episode, user=self.user, answer=action.content)

    # --- a game's clock ---------------------------------------------------------------------------

    def game_clock(self, choice: str) -> str:
        """How a game's time runs while a person plays it (GAME_CLOCKS): per action (the default: the page
        stands still between inputs, each input costs the game one step), real time, or half speed."""
        self._check_running()
        self._check_control()
        params = GAME_CLOCKS.get(choice)
        if params is None:
            raise DemoError(f"game clock must be one of {', '.join(GAME_CLOCKS)}")
        self.flush()
        try:
            self.env.call("game_clock", **params)
        except SandboxError as exc:
            raise DemoError(f"this sandbox's clock cannot change: {exc}") from None
        self.clock = choice
        return choice

    # --- tools (MCP servers inside the sandbox) ----------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """The MCP tools the sandbox offers ([] where it has none), as its servers describe them;
        ToolsUnavailable saying why where its servers cannot start (the sandbox itself goes on)."""
        self._check_running()
        try:
            found = self.env.call("mcp_tools")
        except (OperationUnsupported, ActionUnsupported):  # a sandbox without MCP (a browser, say)
            return []
        except ActionRejected as exc:  # a server could not start (sandbox_workers.mcp.hub)
            raise ToolsUnavailable(f"the sandbox's tools are unavailable: {exc}") from None
        tools = found.get("tools") if isinstance(found, dict) else found
        return [dict(t) for t in tools or () if isinstance(t, dict)]

    def tool_call(self, server: str, tool: str, arguments: Any) -> dict[str, Any] | None:
        """Call an MCP tool as a step of the demonstration; its result is kept on the step."""
        self._check_running()
        self._check_control()
        if not isinstance(arguments, dict):
            raise DemoError("arguments must be a JSON object")
        try:
            action = McpCall(server=server, tool=tool, arguments=arguments)
        except ActionError as exc:
            raise DemoError(f"the tool call is not valid: {exc}") from None
        self.flush()
        self._carry_out(action, self.env.observe(), actor=Actor.HUMAN, thought=None)
        return self.last_result

    def _carry_out(self, action: Action, obs: Obs, *, actor: str, thought: str | None) -> None:
        self._check_running()
        self._check_control()
        if isinstance(action, Finished):  # finish() records and scores it; nothing to carry out
            raise DemoError("to finish, use Submit (with the answer, if the task asks for one)")
        opened = _Open(obs=obs, observed_at=timezone.now())
        t0 = time.monotonic()
        result = self._execute(action)
        typed = self.thought.strip()
        self._record(
            opened, action, actor=actor, latency_s=time.monotonic() - t0,
            thought=typed or thought or "", info={"result": result} if result is not None else None,
        )  # fmt: skip
        self.last_result = result

    # --- lifetime -------------------------------------------------------------------------------

    def keep_alive(self) -> None:
        """Renew the sandbox lease while the holder is connected."""
        if self.episode.source != Source.AGENT and self.episode.annotator_id == self.user.pk:
            demo_renew(episode=self.episode, env=self.env)

    def submit(self, answer: str = "") -> Episode:
        """Record what is open, then score the final state."""
        self._check_running()
        self.flush()
        return demo_submit(episode=self.episode, user=self.user, answer=answer)

    def close(self) -> None:
        """The connection ended: keep what was begun."""
        try:
            self.flush()
        except (DemoError, EnvError, SandboxError, ActionError) as exc:
            log.info("episode %s: the last step could not be kept: %s", self.episode.pk, exc)
        finally:
            if self._policy is not None:
                self._policy.close()
            if self._env is not None:
                self._env.target.client.close()  # type: ignore[union-attr]


def proposal_json(p: Proposal) -> dict[str, Any]:
    """What the page draws: thought, action (structured and text), or why the output was invalid."""
    return {
        "thought": p.thought,
        "action": action_to_dict(p.action) if p.action else None,
        "action_text": p.action_text,
        "invalid_reason": p.invalid_reason,
        "raw_output": p.raw_output[:4000],
        "latency_ms": p.latency_ms,
    }
