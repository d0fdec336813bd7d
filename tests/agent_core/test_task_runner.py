"""The task runner: setup against an environment, probes, metrics and the reward (a fake Env)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.actions import Action
from agent_core.env import Env, EnvError, ExecOutput, Obs
from agent_core.tasks.runner import TaskSetupError, declares_infeasible, evaluate, prepare, run_probe
from agent_core.tasks.spec import FORMAT, Probe, TaskSpec, TaskSpecError, parse_task

HOME = "/home/user/"


class FakeEnv:
    """An Env with a workspace of files, scripted command outputs and call results; records every call."""

    platform = "desktop"

    def __init__(
        self,
        *,
        files: Mapping[str, bytes | str] | None = None,
        commands: Mapping[str, ExecOutput | Callable[[FakeEnv], ExecOutput]] | None = None,
        results: Mapping[str, Any] | None = None,
    ) -> None:
        self.files = {self.norm(k): v.encode() if isinstance(v, str) else v for k, v in (files or {}).items()}
        self.commands = dict(commands or {})
        self.results = dict(results or {})
        self.calls: list[tuple[Any, ...]] = []

    @staticmethod
    def norm(path: str) -> str:
        return path.removeprefix(HOME).removeprefix("~/")

    def observe(self) -> Obs:
        return Obs(screenshot=b"", width=1, height=1)

    def act(self, action: Action) -> Obs:
        self.calls.append(("act", action))
        return self.observe()

    def exec(self, command: str, *, timeout: float = 30.0) -> ExecOutput:
        self.calls.append(("exec", command, timeout))
        out = self.commands.get(command, ExecOutput(exit_code=0, stdout=""))
        return out(self) if callable(out) else out

    def put_file(self, path: str, data: bytes) -> None:
        self.calls.append(("put_file", path, data))
        self.files[self.norm(path)] = data

    def get_file(self, path: str) -> bytes:
        self.calls.append(("get_file", path))
        try:
            return self.files[self.norm(path)]
        except KeyError:
            raise FileNotFoundError(path) from None

    def call(self, method: str, **params: Any) -> Any:
        self.calls.append(("call", method, params))
        result = self.results.get(method)
        return result(**params) if callable(result) else result


def task(**fields: Any) -> TaskSpec:
    doc: dict[str, Any] = {
        "format": FORMAT,
        "id": "test/runner",
        "instruction": "Do it",
        "platform": "desktop",
        "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "ok"}]},
    }
    return parse_task(doc | fields)


def check(probe: dict[str, Any], metric: str, expected: Any = None, **more: Any) -> dict[str, Any]:
    return {"probe": probe, "metric": metric, "expected": expected, **more}


def test_fake_env_is_an_env() -> None:
    assert isinstance(FakeEnv(), Env)


# --- prepare -------------------------------------------------------------------------------------


def test_setup_runs_in_order_with_rendered_args() -> None:
    spec = task(
        params={"n": {"int": [4, 4]}, "file": {"choice": ["notes.txt"]}},
        setup=[
            {"op": "exec", "command": "seq {{n}} > ~/{{file}}", "timeout": 5},
            {"op": "put_file", "path": "{{file}}.bak", "content": "n={{n}}\n"},
            {"op": "put_file", "path": "bin.dat", "content_b64": base64.b64encode(b"\x00\x01").decode()},
            {"op": "launch", "app": "mousepad", "args": ["{{file}}"], "timeout": 7},
            {"op": "call", "method": "custom", "params": {"count": "{{n}}"}},
            {"op": "goto", "url": "http://localhost/{{file}}"},
            {"op": "miniwob", "task": "click-button", "mode": "slow", "ignored": 1},
            {"op": "wait", "seconds": 0},
        ],
    )
    env = FakeEnv(results={"goto": {"url": "ok"}})
    prepared = prepare(spec, env, seed=3)
    assert prepared.params == {"n": 4, "file": "notes.txt"}
    assert env.calls == [
        ("exec", "seq 4 > ~/notes.txt", 5.0),
        ("put_file", "notes.txt.bak", b"n=4\n"),
        ("put_file", "bin.dat", b"\x00\x01"),
        ("call", "launch", {"app": "mousepad", "args": ["notes.txt"], "timeout": 7.0}),
        ("call", "custom", {"count": 4}),
        ("call", "goto", {"url": "http://localhost/notes.txt"}),
        ("call", "miniwob_start", {"seed": 3, "task": "click-button", "mode": "slow"}),
    ]


def test_saved_results_are_usable_in_the_instruction_and_later_steps() -> None:
    spec = task(
        instruction="Close window {{win.window.title}} (pid {{win.pid}}); the file has {{made.stdout}}lines",
        setup=[
            {"op": "exec", "command": "wc -l < f", "save_as": "made"},
            {"op": "launch", "app": "xterm", "save_as": "win"},
            {"op": "exec", "command": "kill -0 {{win.pid}}"},
        ],
    )
    env = FakeEnv(
        commands={"wc -l < f": ExecOutput(0, "12 ")},
        results={"launch": {"pid": 42, "window": {"title": "xterm"}}},
    )
    prepared = prepare(spec, env)
    assert prepared.instruction == "Close window xterm (pid 42); the file has 12 lines"
    assert prepared.setup["made"] == {"exit_code": 0, "stdout": "12 ", "stderr": ""}
    assert ("exec", "kill -0 42", 30.0) in env.calls
    assert prepared.context["win"]["pid"] == 42


def test_prepare_is_deterministic_per_seed() -> None:
    spec = task(params={"w": {"word": {"length": 10}}}, instruction="Type {{w}}")
    a, b = prepare(spec, FakeEnv(), seed=5), prepare(spec, FakeEnv(), seed=5)
    assert a.instruction == b.instruction and a.params == b.params
    assert len({prepare(spec, FakeEnv(), seed=s).instruction for s in range(10)}) > 1


@pytest.mark.parametrize(
    ("out", "why"),
    [
        (ExecOutput(2, "", "mkdir: cannot create directory"), "exit code 2: mkdir: cannot create directory"),
        (ExecOutput(1, "only stdout says why"), "exit code 1: only stdout says why"),
        (ExecOutput(None, "", "", timed_out=True), "timed out"),
    ],
)
def test_a_failing_exec_setup_raises_task_setup_error(out: ExecOutput, why: str) -> None:
    spec = task(setup=[{"op": "exec", "command": "mkdir /x"}, {"op": "exec", "command": "never"}])
    env = FakeEnv(commands={"mkdir /x": out})
    with pytest.raises(TaskSetupError) as err:
        prepare(spec, env)
    assert isinstance(err.value, EnvError)
    assert "test/runner setup[0]" in str(err.value) and why in str(err.value)
    assert [c[1] for c in env.calls] == ["mkdir /x"]  # it stopped there


def test_an_unchecked_exec_setup_may_fail_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    spec = task(setup=[{"op": "exec", "command": "pkill x", "check": False, "save_as": "k"}])
    with caplog.at_level("WARNING", logger="agent_core.tasks.runner"):
        prepared = prepare(spec, FakeEnv(commands={"pkill x": ExecOutput(1, "", "no process found")}))
    assert prepared.setup["k"] == {"exit_code": 1, "stdout": "", "stderr": "no process found"}
    assert "setup[0]: command exit code 1 (the task goes on" in caplog.text
    assert "no process found" in caplog.text


def test_a_checker_before_result_saved_is_what_a_saved_probe_reads_at_scoring() -> None:
    spec = task(
        checker={
            "before": [{"op": "exec", "command": "ls -R ~/out", "check": False, "save_as": "listing"}],
            "checks": [check({"op": "saved", "key": "listing"}, "contains", "a.eml")],
        }
    )
    env = FakeEnv(commands={"ls -R ~/out": ExecOutput(2, "out:\na.eml\n", "one missing")})
    assert evaluate(prepare(spec, env), env).reward == 1.0  # a non-zero exit still saves the output
    env.commands["ls -R ~/out"] = ExecOutput(0, "out:\n")
    assert evaluate(prepare(spec, env), env).reward == 0.0  # read afresh at each scoring
    # A key that no step saves is refused when the task is read, not at scoring.
    with pytest.raises(TaskSpecError, match="'nope' names no setup or checker.before step's save_as"):
        task(checker={"checks": [check({"op": "saved", "key": "nope"}, "contains", "x")]})


def test_a_failing_goto_raises_task_setup_error() -> None:
    spec = task(setup=[{"op": "goto", "url": "http://x"}])
    with pytest.raises(TaskSetupError, match="loading http://x failed: net::ERR"):
        prepare(spec, FakeEnv(results={"goto": {"error": "net::ERR"}}))


def test_env_errors_of_setup_propagate() -> None:
    class Dead(FakeEnv):
        def exec(self, command: str, *, timeout: float = 30.0) -> ExecOutput:
            raise EnvError("sandbox gone")

    with pytest.raises(EnvError, match="sandbox gone"):
        prepare(task(setup=[{"op": "exec", "command": "true"}]), Dead())


# --- probes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("probe", "found"),
    [
        ({"op": "file", "path": "there.txt"}, "héllo\n"),
        ({"op": "file", "path": "/home/user/there.txt"}, "héllo\n"),
        ({"op": "file", "path": "bad.bin"}, "a\ufffdb"),
        ({"op": "file", "path": "missing.txt"}, None),
        ({"op": "exec", "command": "ok"}, "out\n"),
        ({"op": "exec", "command": "fails"}, None),
        ({"op": "exec", "command": "fails", "any_exit": True}, "partial"),
        ({"op": "exec", "command": "hangs", "any_exit": True}, None),
        ({"op": "answer"}, "the answer"),
        ({"op": "call", "method": "miniwob_reward", "params": {"x": "{{n}}"}}, {"x": 5}),
        ({"op": "a11y"}, "[frame] app"),
        ({"op": "windows"}, [{"title": "xterm"}]),
    ],
)
def test_probes(probe: dict[str, Any], found: Any) -> None:
    env = FakeEnv(
        files={"there.txt": "héllo\n", "bad.bin": b"a\xffb"},
        commands={
            "ok": ExecOutput(0, "out\n"),
            "fails": ExecOutput(3, "partial", "boom"),
            "hangs": ExecOutput(None, "x", timed_out=True),
        },
        results={
            "miniwob_reward": lambda **p: p,
            "a11y": {"tree": "[frame] app"},
            "windows": {"windows": [{"title": "xterm"}]},
        },
    )
    op = probe.pop("op")
    assert run_probe(Probe(op=op, args=probe), env, {"n": 5}, answer="the answer") == found


def test_exec_probe_timeout() -> None:
    env = FakeEnv()
    run_probe(Probe(op="exec", args={"command": "x", "timeout": 3}), env, {})
    assert env.calls == [("exec", "x", 3.0)]


# --- evaluate ------------------------------------------------------------------------------------


def scored(spec: TaskSpec, env: FakeEnv, answer: str = "") -> tuple[float, list[Any]]:
    result = evaluate(prepare(spec, env), env, final_answer=answer)
    return result.reward, list(result.details)


def test_a_check_scores_the_probe_with_the_metric() -> None:
    spec = task(
        params={"n": {"int": [5, 5]}},
        checker={"checks": [check({"op": "file", "path": "answer.txt"}, "number_equal", "{{n}}")]},
    )
    assert scored(spec, FakeEnv(files={"answer.txt": "5\n"}))[0] == 1.0
    reward, details = scored(spec, FakeEnv(files={"answer.txt": "6\n"}))
    assert reward == 0.0
    assert details == [{"check": 0, "metric": "number_equal", "score": 0.0, "artifact": "6\n", "expected": 5}]
    assert scored(spec, FakeEnv())[0] == 0.0  # no file: None


@pytest.mark.parametrize(
    ("combine", "outcomes", "reward"),
    [
        ("all", (True, True), 1.0),
        ("all", (True, False), 0.0),
        ("any", (False, True), 1.0),
        ("any", (False, False), 0.0),
    ],
)
def test_combine(combine: str, outcomes: tuple[bool, ...], reward: float) -> None:
    files = {f"f{i}": "x" for i, ok in enumerate(outcomes) if ok}
    checks = [check({"op": "file", "path": f"f{i}"}, "exists") for i in range(len(outcomes))]
    spec = task(checker={"combine": combine, "checks": checks})
    assert scored(spec, FakeEnv(files=files))[0] == reward


@given(outcomes=st.lists(st.booleans(), min_size=1, max_size=6), combine=st.sampled_from(["all", "any"]))
def test_combine_property(outcomes: list[bool], combine: str) -> None:
    commands = {f"c{i}": ExecOutput(0 if ok else 1, "y") for i, ok in enumerate(outcomes)}
    checks = [check({"op": "exec", "command": f"c{i}"}, "exists") for i in range(len(outcomes))]
    spec = task(checker={"combine": combine, "checks": checks})
    reward, details = scored(spec, FakeEnv(commands=commands))
    assert reward == float(all(outcomes) if combine == "all" else any(outcomes))
    assert [d["score"] for d in details] == [float(ok) for ok in outcomes]


def test_graded_metrics_combine_by_min_and_max() -> None:
    checks = [
        check({"op": "file", "path": "a"}, "diff_text_file", "1\n2\n3\n4\n"),
        check({"op": "file", "path": "a"}, "diff_text_file", "1\n2\n"),
    ]
    env = FakeEnv(files={"a": "1\n2\n3\n"})  # 2·3/7 and 2·2/5
    assert scored(task(checker={"checks": checks}), env)[0] == pytest.approx(4 / 5)
    assert scored(task(checker={"checks": checks, "combine": "any"}), env)[0] == pytest.approx(6 / 7)


def test_expected_probe() -> None:
    c = check(
        {"op": "file", "path": "answer.txt"},
        "number_equal",
        None,
        expected_probe={"op": "exec", "command": "wc"},
    )
    spec = task(checker={"checks": [c]})
    env = FakeEnv(files={"answer.txt": "12"}, commands={"wc": ExecOutput(0, "12 notes.txt\n")})
    reward, details = scored(spec, env)
    assert reward == 1.0 and details[0]["expected"] == "12 notes.txt\n"
    env = FakeEnv(files={"answer.txt": "12"}, commands={"wc": ExecOutput(0, "13 notes.txt\n")})
    assert scored(spec, env)[0] == 0.0


@pytest.mark.parametrize(
    ("select", "metric", "expected", "reward"),
    [
        ("reward", "json_equal", 1, 1.0),
        ("windows.0.title", "exact_match", "xterm", 1.0),
        ("windows.-1.title", "exact_match", "mousepad", 1.0),
        ("windows.1", "json_equal", {"title": "mousepad"}, 1.0),
        ("nope", "json_equal", 1, 0.0),
        ("nope", "absent", None, 1.0),
    ],
)
def test_select(select: str, metric: str, expected: Any, reward: float) -> None:
    c = check({"op": "call", "method": "state"}, metric, expected, select=select)
    env = FakeEnv(results={"state": {"reward": 1, "windows": [{"title": "xterm"}, {"title": "mousepad"}]}})
    assert scored(task(checker={"checks": [c]}), env)[0] == reward


@pytest.mark.parametrize(
    ("c", "error"),
    [
        (check({"op": "answer"}, "regex_match", "([unclosed"), "unterminated character set"),
        (check({"op": "answer"}, "number_equal", 3, options={"tolerance": "x"}), "not supported between"),
        (check({"op": "answer"}, "check_csv", ["not", "rules"]), "mapping of rules"),
        (check({"op": "answer"}, "exact_match", "x", options={"bogus": 1}), "bogus"),
    ],
)
def test_a_metric_that_raises_scores_zero_with_the_error(c: dict[str, Any], error: str) -> None:
    ok = check({"op": "answer"}, "exists")
    reward, details = scored(task(checker={"checks": [ok, c], "combine": "any"}), FakeEnv(), answer="3")
    assert reward == 1.0  # the other check still counts
    assert details[1]["score"] == 0.0 and error in details[1]["error"]
    assert details[1]["artifact"] == "3"


def test_long_artifacts_are_shortened_in_details() -> None:
    c = check({"op": "file", "path": "big"}, "exists")
    _, details = scored(task(checker={"checks": [c]}), FakeEnv(files={"big": "x" * 1000}))
    assert details[0]["artifact"].startswith("x" * 300) and "(1000 chars)" in details[0]["artifact"]


# --- infeasible ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("infeasible", "answer", "reward"),
    [
        (True, "infeasible: there is no such app", 1.0),
        (True, "  INFEASIBLE", 1.0),
        (True, "done", 0.0),
        (True, "", 0.0),
        (False, "infeasible", 0.0),
        (False, "ok", 1.0),
        (False, "not ok", 0.0),
    ],
)
def test_infeasible(infeasible: bool, answer: str, reward: float) -> None:
    spec = task(infeasible=True) if infeasible else task()
    result = evaluate(prepare(spec, FakeEnv()), FakeEnv(), final_answer=answer)
    assert result.reward == reward
    if infeasible or declares_infeasible(answer):
        assert result.details == (
            {"check": "infeasible", "declared": declares_infeasible(answer), "score": reward},
        )


def test_an_infeasible_task_probes_nothing() -> None:
    env = FakeEnv()
    spec = task(infeasible=True)
    evaluate(prepare(spec, env), env, final_answer="infeasible")
    assert env.calls == []


@pytest.mark.parametrize(
    ("answer", "declared"),
    [("infeasible", True), ("Infeasible, sorry", True), ("\n infeasible", True), ("it is infeasible", False)],
)
def test_declares_infeasible(answer: str, declared: bool) -> None:
    assert declares_infeasible(answer) is declared


@pytest.fixture
def odd_metrics() -> Iterator[None]:
    """Metrics returning what no metric should (registered for one test only)."""
    from agent_core.tasks import metrics

    metrics.register_metric("test_only_nan")(lambda artifact, expected: float("nan"))
    metrics.register_metric("test_only_big")(lambda artifact, expected: 7.0)
    yield
    del metrics._METRICS["test_only_nan"], metrics._METRICS["test_only_big"]


@pytest.mark.usefixtures("odd_metrics")
def test_non_finite_scores_are_errors_and_scores_are_clamped() -> None:
    checks = [check({"op": "answer"}, "test_only_nan"), check({"op": "answer"}, "test_only_big")]
    reward, details = scored(task(checker={"checks": checks, "combine": "any"}), FakeEnv())
    assert reward == 1.0
    assert details[0]["score"] == 0.0 and "nan" in details[0]["error"]
    assert details[1]["score"] == 1.0
    reward, _ = scored(task(checker={"checks": checks, "combine": "all"}), FakeEnv())
    assert reward == 0.0
