"""Run a task's setup against an environment, and score the end state with its checker."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from agent_core.actions.model import Action
from agent_core.data.trajectory import CheckResult
from agent_core.env import Env, EnvError
from agent_core.tasks.metrics import get_metric
from agent_core.tasks.osworld_metrics import file_value
from agent_core.tasks.spec import Check, Probe, SetupStep, TaskSpec
from agent_core.tasks.templating import render, select_path

log = logging.getLogger(__name__)
INFEASIBLE_PREFIX = "infeasible"


class TaskSetupError(EnvError):
    """A setup step failed: the episode cannot start fairly, so it is an env_error, not a failure."""


@dataclass(frozen=True)
class PreparedTask:
    """A task made ready in one environment: its drawn parameters, instruction and setup results."""

    spec: TaskSpec
    seed: int
    params: Mapping[str, Any]
    instruction: str
    setup: Mapping[str, Any] = field(default_factory=dict)
    tools: tuple[Mapping[str, Any], ...] = ()
    """The MCP tools of the servers the task names (`spec.mcp`), as the sandbox lists them: the prompt's."""

    @property
    def context(self) -> dict[str, Any]:
        """What templates may name: the parameters and the saved setup results."""
        return {**self.params, **self.setup}


def declares_infeasible(answer: str) -> bool:
    """Whether a `finished(content=...)` answer declares the task infeasible."""
    return answer.strip().lower().startswith(INFEASIBLE_PREFIX)


def prepare(spec: TaskSpec, env: Env, *, seed: int = 0) -> PreparedTask:
    """Draw the parameters for `seed`, run the setup steps in order, render the instruction."""
    t0 = time.monotonic()
    params = spec.draw_params(seed)
    saved: dict[str, Any] = {}
    for i, step in enumerate(spec.setup):
        result = _run_setup(step, env, {**params, **saved}, seed=seed, where=f"{spec.id} setup[{i}]")
        if step.save_as:
            saved[step.save_as] = result
    instruction = str(render(spec.instruction, {**params, **saved}))
    tools = _mcp_tools(spec, env) if spec.mcp else ()
    log.info("prepared %s seed=%s in %.0f ms", spec.id, seed, (time.monotonic() - t0) * 1000)
    return PreparedTask(
        spec=spec, seed=seed, params=params, instruction=instruction, setup=saved, tools=tools
    )


def _mcp_tools(spec: TaskSpec, env: Env) -> tuple[Mapping[str, Any], ...]:
    """The tools of the MCP servers `spec` names, from the sandbox (which starts them): TaskSetupError
    when the sandbox does not run one of them."""
    listed = env.call("mcp_tools", servers=list(spec.mcp))
    found = listed.get("tools") if isinstance(listed, Mapping) else None
    tools = [t for t in found or [] if isinstance(t, Mapping)]
    missing = sorted(set(spec.mcp) - {str(t.get("server")) for t in tools})
    if missing:
        have = sorted({str(t.get("server")) for t in tools}) or ["none"]
        raise TaskSetupError(
            f"{spec.id}: the sandbox runs no MCP server {', '.join(missing)} (it has {', '.join(have)})"
        )
    return tuple(t for t in tools if t.get("server") in spec.mcp)


def _run_setup(step: SetupStep, env: Env, context: Mapping[str, Any], *, seed: int, where: str) -> Any:
    args = render(dict(step.args), context)
    op = step.op
    if op == "exec":
        out = env.exec(str(args["command"]), timeout=step.timeout)
        if out.timed_out or out.exit_code != 0:
            why = "timed out" if out.timed_out else f"exit code {out.exit_code}"
            said = (out.stderr or out.stdout).strip()[-500:]
            if args.get("check", True):
                raise TaskSetupError(f"{where}: command {why}: {said}")
            log.warning("%s: command %s (the task goes on, as its source does): %s", where, why, said)
        return {"exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr}
    if op == "put_file":
        data = (
            base64.b64decode(args["content_b64"])
            if "content_b64" in args
            else str(args["content"]).encode("utf-8")
        )
        env.put_file(str(args["path"]), data)
        return {"path": args["path"], "size": len(data)}
    if op == "launch":
        title = args.get("title")
        params = {"title": str(title)} if title else {}
        result = env.call(
            "launch", app=args["app"], args=list(args.get("args", [])), timeout=step.timeout, **params
        )
        if title and not (isinstance(result, Mapping) and result.get("window")):
            # As OSWorld's server does: say so and go on (the checker scores what the agent makes of it).
            log.warning("%s: no %s window titled …%s… within %g s", where, args["app"], title, step.timeout)
        return result
    if op == "call":
        return env.call(str(args["method"]), **dict(args.get("params", {})))
    if op == "goto":
        result = env.call("goto", url=args["url"])
        if isinstance(result, Mapping) and result.get("error"):
            raise TaskSetupError(f"{where}: loading {args['url']} failed: {result['error']}")
        return result
    if op == "miniwob":
        params = {k: v for k, v in args.items() if k in ("task", "mode", "paused")}
        return env.call("miniwob_start", seed=args.get("seed", seed), **params)
    if op == "game":
        # A game of the games suite, seeded with the episode's seed (paused: page time moves per action).
        params = {k: v for k, v in args.items() if k in ("game", "paused", "step_ms", "rate")}
        return env.call("game_start", seed=args.get("seed", seed), **params)
    if op == "wait":
        time.sleep(float(args["seconds"]))  # a settle time the task author asked for
        return None
    if op == "fetch":
        # Fetched by the sandbox host (its cache, its mirror), never by the sandbox.
        return env.call("fetch", url=args["url"], path=args["path"], timeout=step.timeout)
    if op == "pyautogui":
        for action in _pyautogui_actions(env, str(args["code"]), args.get("screen", [1920, 1080]), where):
            env.act(action)
        return None
    if op == "window":
        result = env.call(
            "window",
            action=args["action"],
            name=args["name"],
            strict=bool(args.get("strict", False)),
            by_class=bool(args.get("by_class", False)),
        )
        if args.get("check", True) and not (isinstance(result, Mapping) and result.get("window")):
            raise TaskSetupError(f"{where}: no window matches {args['name']!r} to {args['action']}")
        return result
    if op == "osworld_setup":
        # OSWorld's own setup code (its SetupController's), on the browser's DevTools that the sandbox
        # host serves: agent_core.tasks.osworld_worker.
        from agent_core.tasks import osworld_metrics

        got = env.call("devtools")
        endpoint = got.get("endpoint") if isinstance(got, Mapping) else None
        try:
            osworld_metrics.setup(str(args["step"]), dict(args["params"]), endpoint, timeout=step.timeout)
        except osworld_metrics.OSWorldMetricError as exc:
            raise TaskSetupError(f"{where}: OSWorld's {args['step']} failed: {exc}") from exc
        return None
    raise TaskSetupError(f"{where}: unknown setup op {op!r}")


def _pyautogui_actions(env: Env, code: str, screen: Any, where: str) -> list[Action]:
    """The actions of a pyautogui script written for `screen`, scaled to the sandbox's screen: run
    through the sandbox's own input path (read with ast, never executed)."""
    from agent_core.actions.grammar import ActionParseError
    from agent_core.actions.pyautogui_code import parse_pyautogui

    width, height = int(screen[0]), int(screen[1])
    try:
        actions = parse_pyautogui(code, screen=(width, height))
    except ActionParseError as exc:
        raise TaskSetupError(f"{where}: pyautogui code not understood: {exc}") from None
    obs = env.observe()
    sx, sy = obs.width / width, obs.height / height
    if (sx, sy) == (1.0, 1.0):
        return list(actions)
    scaled = []
    for action in actions:
        changes = {}
        for f in dataclasses.fields(action):
            value = getattr(action, f.name)
            if f.name in ("x", "x1", "x2") and isinstance(value, int):
                changes[f.name] = min(obs.width - 1, round(value * sx))
            elif f.name in ("y", "y1", "y2") and isinstance(value, int):
                changes[f.name] = min(obs.height - 1, round(value * sy))
        scaled.append(dataclasses.replace(action, **changes))
    return scaled


def evaluate(prepared: PreparedTask, env: Env, *, final_answer: str = "") -> CheckResult:
    """The reward for the environment's state now (and the agent's final answer)."""
    spec = prepared.spec
    infeasible_declared = declares_infeasible(final_answer)
    if spec.infeasible or infeasible_declared:
        # Declaring infeasibility is right exactly when the task is infeasible; no probe can change that.
        reward = float(spec.infeasible == infeasible_declared)
        return CheckResult(
            reward=reward,
            details=({"check": "infeasible", "declared": infeasible_declared, "score": reward},),
        )
    context = dict(prepared.context)
    for i, step in enumerate(spec.checker.before):
        result = _run_setup(step, env, context, seed=prepared.seed, where=f"{spec.id} checker.before[{i}]")
        if step.save_as:
            context[step.save_as] = result  # what the probes may read (`saved`)
    details = []
    scores = []
    for i, check in enumerate(spec.checker.checks):
        score, detail = _score(check, env, context, final_answer)
        details.append({"check": i, "metric": check.metric, "score": score, **detail})
        scores.append(score)
    return CheckResult(reward=combine(scores, spec.checker.combine), details=tuple(details))


def combine(scores: list[float], how: str) -> float:
    """The task's reward from its checks' scores: `all` the minimum, `any` the maximum, `all_mean`
    OSWorld's `and`. OSWorld's `DesktopEnv.evaluate()` (desktop-env 1.0.2) stops at the first 0 of an
    `and` (returns 0) and at the first 1 of an `or` (returns 1), else returns
    `sum(results) / len(results) if conj == 'and' else max(results)`: `and` is 0 when any score is 0,
    else the mean (`all_mean`); `or` is the maximum (`any`)."""
    if how == "all":
        reward = min(scores)
    elif how == "any":
        reward = max(scores)
    elif how == "all_mean":
        reward = 0.0 if any(s == 0 for s in scores) else sum(scores) / len(scores)
    else:
        raise ValueError(f"unknown combine {how!r}")
    return max(0.0, min(1.0, reward))


def _score(check: Check, env: Env, context: Mapping[str, Any], answer: str) -> tuple[float, dict[str, Any]]:
    artifact = select_path(run_probe(check.probe, env, context, answer=answer), check.select)
    if check.expected_probe is not None:
        expected = run_probe(check.expected_probe, env, context, answer=answer)
    else:
        expected = render(check.expected, context)
    options = render(dict(check.options), context)
    try:
        score = float(get_metric(check.metric)(artifact, expected, **options))
        if not math.isfinite(score):
            raise ValueError(f"metric {check.metric} gave {score}")
    except EnvError:
        raise  # the scorer itself is unusable (e.g. OSWorld's metrics process): not the agent's doing
    except Exception as exc:  # noqa: BLE001 - a metric is pure: whatever it raises is about the artifact
        # A metric that cannot read the artifact scores 0 and says why; it never fails the episode.
        return 0.0, {"artifact": _short(artifact), "expected": _short(expected), "error": str(exc)}
    return max(0.0, min(1.0, score)), {"artifact": _short(artifact), "expected": _short(expected)}


def run_probe(probe: Probe, env: Env, context: Mapping[str, Any], *, answer: str = "") -> Any:
    """Read one thing from the environment; None when it is not there (missing file, failed command)."""
    args = render(dict(probe.args), context)
    if probe.op == "answer":
        return answer
    if probe.op == "saved":
        # A setup or checker.before step's result (`save_as`): its `field` (stdout), as a file named
        # `file` when one is given (OSWorld's cache_file getter hands metrics a path).
        value = context.get(str(args["key"]))
        if isinstance(value, Mapping):
            value = value.get(str(args.get("field", "stdout")))
        if value is None or not args.get("file"):
            return value
        return file_value(str(value).encode(), str(args["file"]))
    if probe.op == "exec":
        out = env.exec(str(args["command"]), timeout=float(args.get("timeout", 30)))
        if out.timed_out or (out.exit_code != 0 and not args.get("any_exit", False)):
            return None
        if args.get("parse") == "json":
            try:
                return json.loads(out.stdout)
            except (ValueError, RecursionError):  # what the sandbox printed is the agent's doing, not ours
                return None
        if args.get("file"):  # a metric that reads a file (OSWorld's getters write the output to one)
            return file_value(out.stdout.encode(), str(args["file"]))
        return out.stdout
    if probe.op == "file":
        try:
            data = env.get_file(str(args["path"]))
        except FileNotFoundError:
            return None
        if args.get("raw"):
            return file_value(data, str(args.get("name") or PurePosixPath(str(args["path"])).name))
        return data.decode("utf-8", "replace")
    if probe.op == "files":
        # OSWorld's multi vm_file: every path read, None for a missing one; `gives` picks which.
        values: list[Any] = []
        names = list(args.get("names") or [PurePosixPath(str(p)).name for p in args["paths"]])
        for path, name in zip(args["paths"], names, strict=True):
            try:
                values.append(file_value(env.get_file(str(path)), str(name)))
            except FileNotFoundError:
                values.append(None)
        gives = list(args.get("gives", range(len(values))))
        picked = [values[int(i)] for i in gives]
        return picked[0] if len(picked) == 1 else picked
    if probe.op == "fetch":
        # A reference file (OSWorld's cloud_file), fetched by the sandbox host from its cache or mirror.
        got = env.call("fetch", url=args["url"], timeout=float(args.get("timeout", 120)))
        data = base64.b64decode(got["content_b64"])
        return file_value(data, str(args.get("name") or PurePosixPath(urlsplit(str(args["url"])).path).name))
    if probe.op == "call":
        return env.call(str(args["method"]), **dict(args.get("params", {})))
    if probe.op == "a11y":
        return select_path(env.call("a11y"), "tree")
    if probe.op == "a11y_xml":  # OSWorld's XML form (its accessibility_tree getter)
        return select_path(env.call("a11y_xml", renames=dict(args.get("renames", {}))), "tree")
    if probe.op == "browser":
        # What OSWorld's Chrome getters read: the accessibility tree (first, as they do), then the
        # browser's DevTools endpoint (its ticket: `_short` keeps it out of the details).
        state: dict[str, Any] = {}
        if args.get("a11y"):
            state["tree"] = select_path(env.call("a11y_xml", renames=dict(args.get("renames", {}))), "tree")
        got = env.call("devtools")
        state["endpoint"] = got.get("endpoint") if isinstance(got, Mapping) else None
        return state
    if probe.op == "windows":
        return select_path(env.call("windows"), "windows")
    raise ValueError(f"unknown probe op {probe.op!r}")


def _short(value: Any, limit: int = 300) -> Any:
    if (
        isinstance(value, Mapping)
        and isinstance(value.get("endpoint"), str)
        and "/devtools/" in value["endpoint"]
    ):
        # A browser's DevTools endpoint (osworld_setup, DevTools getters): its ticket is a credential.
        return {"devtools": value["endpoint"].rsplit("/", 1)[0] + "/…"}
    if isinstance(value, Mapping) and "__file__" in value:
        return {"file": value.get("name"), "bytes": len(base64.b64decode(value["__file__"]))}
    if isinstance(value, list):
        return [_short(v, limit) for v in value[:20]]
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"… ({len(value)} chars)"
    return value
