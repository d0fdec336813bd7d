"""The OpenAI-compatible policy against a real local HTTP server that answers the way vLLM does."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from agent_core.actions.compat import parse_output
from agent_core.env import Obs
from agent_core.policies import PolicyError, PolicyInput, make_policy
from agent_core.policies.openai import SERVERS, OpenAIPolicy, list_models

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really a png").decode()
IMAGE_URL = f"data:image/png;base64,{PNG}"
REPLY = "Thought: the button is there.\nAction: click(start_box='(10,20)')"
REPLY_IDS = [101, 102, 103, 104]
PROMPT_IDS = [1, 2, 3, 4, 5, 6]


def vllm_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as vLLM writes it for `body` (token ids / logprobs only when asked for)."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": REPLY, "reasoning_content": None, "tool_calls": []},
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
    }
    as_ids = body.get("return_tokens_as_token_ids")
    if body.get("logprobs"):
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{t}" if as_ids else f"tok{t}",
                    "logprob": -0.25 * (i + 1),
                    "bytes": [1],
                    "top_logprobs": [],
                }
                for i, t in enumerate(REPLY_IDS)
            ]
        }
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": body.get("model"),
        "choices": [choice],
        "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": 4, "total_tokens": 10},
        "prompt_logprobs": None,
    }
    if body.get("return_token_ids"):
        choice["token_ids"] = REPLY_IDS
        out["prompt_token_ids"] = PROMPT_IDS
    return out


@dataclass
class FakeServer:
    """Records every request; answers each from `script` (first in, first out), else vllm_reply."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    script: list[Any] = field(default_factory=list)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        step = self.script.pop(0) if self.script else None
        if step is None:
            return web.json_response(vllm_reply(body))
        if callable(step):
            return await step(body)
        return step  # a ready web.Response

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "ui-tars-7b", "object": "model"}]})


@pytest.fixture(autouse=True)
def _fresh_server_counts() -> Iterator[None]:
    # In-flight counts and cool-offs are per process; a test starts from none.
    SERVERS.reset()
    yield
    SERVERS.reset()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with running_server() as fake:
        yield fake


@pytest.fixture
def other() -> Iterator[FakeServer]:
    """A second server of the same model."""
    with running_server() as fake:
        yield fake


@contextmanager
def running_server() -> Iterator[FakeServer]:
    fake = FakeServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.chat)
    app.router.add_get("/v1/models", fake.models)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, shutdown_timeout=0.5)

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        fake.url = f"http://127.0.0.1:{port}/v1"

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def policy_input() -> PolicyInput:
    messages = (
        {"role": "system", "content": "You are a GUI agent."},
        {
            "role": "user",
            "content": (
                {"type": "text", "text": "Open the settings"},
                {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            ),
        },
        {"role": "assistant", "content": "Thought: earlier\nAction: wait()"},
    )
    obs = Obs(screenshot=b"png", width=1280, height=800)
    return PolicyInput(instruction="Open the settings", observation=obs, step_index=1, messages=messages)


def make(server: FakeServer, **config: Any) -> OpenAIPolicy:
    config.setdefault("timeout_s", 10)  # a test that hangs fails in seconds, not minutes
    policy = make_policy("openai", base_url=server.url, model="ui-tars-7b", **config)
    assert isinstance(policy, OpenAIPolicy)
    return policy


def error_response(status: int, message: str, **headers: str) -> web.Response:
    body = {"object": "error", "message": message, "type": "BadRequestError", "code": status}
    return web.json_response(body, status=status, headers=headers)


def test_sends_the_prompt_and_keeps_vllm_token_ids_and_logprobs(server: FakeServer) -> None:
    policy = make(
        server,
        temperature=0.7,
        max_tokens=64,
        extra_body={"return_token_ids": True, "top_k": 5},
        api_key="sk-test",
    )
    out = policy.act(policy_input())
    policy.close()

    sent = server.requests[0]
    assert sent["model"] == "ui-tars-7b"
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 64
    assert sent["logprobs"] is True
    assert sent["return_token_ids"] is True and sent["top_k"] == 5
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant"]
    assert sent["messages"][1]["content"][1] == {"type": "image_url", "image_url": {"url": IMAGE_URL}}
    assert server.headers[0]["Authorization"] == "Bearer sk-test"

    assert out.text == REPLY
    assert out.token_ids == tuple(REPLY_IDS)
    assert out.logprobs == (-0.25, -0.5, -0.75, -1.0)
    assert out.prompt_token_ids == tuple(PROMPT_IDS)
    assert out.meta["finish_reason"] == "stop"
    assert out.meta["usage"]["total_tokens"] == 10
    assert out.meta["attempts"] == 1
    assert out.actions is None


def test_token_ids_from_logprob_tokens_when_returned_as_ids(server: FakeServer) -> None:
    policy = make(server, extra_body={"return_tokens_as_token_ids": True})
    out = policy.act(policy_input())
    assert out.token_ids == tuple(REPLY_IDS)
    assert out.logprobs is not None and len(out.logprobs) == len(REPLY_IDS)
    assert out.prompt_token_ids is None


def test_openai_style_response_without_token_ids(server: FakeServer) -> None:
    policy = make(server)
    out = policy.act(policy_input())
    assert out.text == REPLY
    assert out.logprobs == (-0.25, -0.5, -0.75, -1.0)
    assert out.token_ids is None and out.prompt_token_ids is None

    no_logprobs = make(server, logprobs=False)
    out = no_logprobs.act(policy_input())
    assert "logprobs" not in server.requests[-1]
    assert out.text == REPLY and out.logprobs is None and out.token_ids is None


def test_api_key_from_environment(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "sk-env")
    make(server, api_key_env="TEST_LLM_KEY").act(policy_input())
    assert server.headers[0]["Authorization"] == "Bearer sk-env"
    monkeypatch.delenv("TEST_LLM_KEY")
    with pytest.raises(PolicyError, match="TEST_LLM_KEY"):
        make(server, api_key_env="TEST_LLM_KEY")
    assert "sk-env" not in repr(make(server, api_key="sk-env"))


def test_retries_503_then_succeeds(server: FakeServer) -> None:
    server.script = [error_response(503, "loading"), error_response(429, "slow down", **{"Retry-After": "0"})]
    out = make(server, retry_backoff_s=0.01).act(policy_input())
    assert out.text == REPLY
    assert out.meta["attempts"] == 3
    assert len(server.requests) == 3


def test_gives_up_after_max_retries(server: FakeServer) -> None:
    server.script = [error_response(503, "overloaded") for _ in range(3)]  # a response is sent only once
    with pytest.raises(PolicyError, match=r"HTTP 503: overloaded \(after 2 attempts\)"):
        make(server, max_retries=1, retry_backoff_s=0.01).act(policy_input())
    assert len(server.requests) == 2


def test_400_is_an_error_with_the_servers_text_and_no_retry(server: FakeServer) -> None:
    long = "This model's maximum context length is 32768 tokens. " * 40
    server.script = [error_response(400, long)]
    with pytest.raises(PolicyError) as info:
        make(server, retry_backoff_s=0.01).act(policy_input())
    message = str(info.value)
    assert "HTTP 400" in message and "maximum context length is 32768" in message
    assert len(message) < 800  # truncated
    assert len(server.requests) == 1

    server.script = [web.json_response({"error": {"message": "model not found", "code": 404}}, status=404)]
    with pytest.raises(PolicyError, match="HTTP 404: model not found"):
        make(server).act(policy_input())


def test_malformed_json_and_missing_choices(server: FakeServer) -> None:
    server.script = [web.Response(text="<html>gateway</html>", content_type="text/html")]
    with pytest.raises(PolicyError, match="malformed JSON.*gateway"):
        make(server).act(policy_input())
    server.script = [web.json_response({"id": "x", "choices": []})]
    with pytest.raises(PolicyError, match="no choices"):
        make(server).act(policy_input())
    server.script = [web.json_response(["not", "an", "object"])]
    with pytest.raises(PolicyError, match="expected a JSON object"):
        make(server).act(policy_input())


def test_empty_content_is_not_an_error(server: FakeServer) -> None:
    async def empty(body: dict[str, Any]) -> web.Response:
        reply = vllm_reply(body)
        reply["choices"][0]["message"]["content"] = None
        reply["choices"][0]["finish_reason"] = "length"
        reply["choices"][0]["logprobs"] = None
        return web.json_response(reply)

    server.script = [empty]
    out = make(server).act(policy_input())
    assert out.text == ""
    assert out.meta["finish_reason"] == "length"
    assert out.logprobs is None


def test_connection_refused(server: FakeServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on `port` now.
    policy = make_policy(
        "openai", base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, retry_backoff_s=0.01
    )
    with pytest.raises(PolicyError, match=r"cannot reach the server.*\(after 2 attempts\)"):
        policy.act(policy_input())
    with pytest.raises(PolicyError, match="GET http://127.0.0.1"):
        list_models(f"http://127.0.0.1:{port}/v1", timeout=1)


def test_timeout(server: FakeServer) -> None:
    async def slow(body: dict[str, Any]) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response(vllm_reply(body))

    server.script = [slow]
    with pytest.raises(PolicyError, match=r"timed out after 0.3 s"):
        make(server, timeout_s=0.3).act(policy_input())
    assert len(server.requests) == 1  # a slow server is not asked again


def test_list_models(server: FakeServer) -> None:
    assert list_models(server.url) == ["ui-tars-7b"]
    assert list_models(server.url + "/") == ["ui-tars-7b"]


def test_configuration_errors() -> None:
    with pytest.raises(PolicyError, match="bad configuration"):
        make_policy("openai", base_url="http://x/v1", model="m", nonsense=1)
    with pytest.raises(PolicyError, match="base_url and model"):
        make_policy("openai", base_url="", model="m")
    policy = make_policy("openai", base_url="http://127.0.0.1:9/v1", model="m")
    empty = PolicyInput(instruction="x", observation=Obs(b"", 1, 1), step_index=0)
    with pytest.raises(PolicyError, match="messages is empty"):
        policy.act(empty)


def test_request_body_is_plain_json() -> None:
    policy = OpenAIPolicy(base_url="http://h/v1", model="m", logprobs=True, top_logprobs=2)
    body = policy.request_body(policy_input())
    assert json.loads(json.dumps(body)) == body
    assert body["top_logprobs"] == 2
    assert (policy.coords, policy.output_format) == ("smart_resize", "uitars")
    other = OpenAIPolicy(base_url="http://h/v1", model="m", coords="relative", output_format="json")
    assert (other.coords, other.output_format) == ("relative", "json")


def test_tool_calls_a_server_took_out_of_the_content_reach_the_tool_calls_parser(server: FakeServer) -> None:
    # vLLM with a tool-call parser (--enable-auto-tool-choice) answers a computer_use call in
    # message.tool_calls with the content empty: the policy's text must still carry the call.
    call = {"action": "left_click", "coordinate": [640, 400]}

    async def tool_call(body: dict[str, Any]) -> web.Response:
        reply = vllm_reply(body)
        message = reply["choices"][0]["message"]
        message["content"] = "I will open the settings."
        message["tool_calls"] = [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "computer_use", "arguments": json.dumps(call)},
            }
        ]
        reply["choices"][0]["finish_reason"] = "tool_calls"
        return web.json_response(reply)

    server.script = [tool_call]
    out = make(server, output_format="tool_calls", coords="absolute").act(policy_input())
    parsed = parse_output(
        out.text, fmt="tool_calls", screen=(1280, 800), coords="absolute", platform="desktop"
    )
    assert [type(a).__name__ for a in parsed.actions] == ["Click"]
    assert parsed.thought == "I will open the settings."
    # Without tool_calls the text is the content, unchanged.
    assert make(server).act(policy_input()).text == REPLY


def closed_url() -> str:
    """The URL of a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_requests_spread_over_the_servers(server: FakeServer, other: FakeServer) -> None:
    policy = make(server, base_urls=[other.url + "/"])
    answered = [policy.act(policy_input()).meta["server"] for _ in range(4)]
    # Both idle each time: the least recently used one takes the request.
    assert answered == [server.url, other.url, server.url, other.url]
    assert len(server.requests) == len(other.requests) == 2
    assert "base_urls" in repr(policy)


def test_a_server_busy_with_a_slow_request_is_passed_over(server: FakeServer, other: FakeServer) -> None:
    arrived, release = threading.Event(), threading.Event()

    async def slow(body: dict[str, Any]) -> web.Response:  # answers once the test lets it
        arrived.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        return web.json_response(vllm_reply(body))

    server.script = [slow]
    # Two episodes' policies, one process: the count of requests in flight is shared.
    first, second = make(server, base_urls=[other.url]), make(server, base_urls=[other.url])
    answers: list[str] = []
    worker = threading.Thread(target=lambda: answers.append(first.act(policy_input()).meta["server"]))
    worker.start()
    assert arrived.wait(5), "the first request never reached the first server"
    assert SERVERS.in_flight(server.url) == 1
    assert second.act(policy_input()).meta["server"] == other.url
    release.set()
    worker.join(timeout=10)
    assert answers == [server.url]
    assert SERVERS.in_flight(server.url) == SERVERS.in_flight(other.url) == 0


def test_a_refusing_server_is_skipped_and_cools_off(server: FakeServer) -> None:
    dead = closed_url()
    policy = make_policy(
        "openai", base_url=dead, base_urls=[server.url], model="m", max_retries=1, retry_backoff_s=0.01
    )
    out = policy.act(policy_input())
    assert out.meta["server"] == server.url
    assert out.meta["attempts"] == 3  # two on the dead server, one on the live one
    # Cooling off: the next request goes straight to the live server.
    out = policy.act(policy_input())
    assert (out.meta["server"], out.meta["attempts"]) == (server.url, 1)
    assert len(server.requests) == 2


def test_a_server_answering_503_after_the_retries_hands_over(server: FakeServer, other: FakeServer) -> None:
    server.script = [error_response(503, "overloaded") for _ in range(2)]
    out = make(server, base_urls=[other.url], max_retries=1, retry_backoff_s=0.01).act(policy_input())
    assert (out.meta["server"], out.meta["attempts"]) == (other.url, 3)
    assert len(server.requests) == 2 and len(other.requests) == 1


def test_all_servers_down_is_a_policy_error() -> None:
    dead, also_dead = closed_url(), closed_url()
    policy = make_policy("openai", base_url=dead, base_urls=[also_dead], model="m", max_retries=0)
    with pytest.raises(PolicyError, match="cannot reach the server") as info:
        policy.act(policy_input())
    assert dead in str(info.value) and also_dead in str(info.value)
    # Both cooling off: the request is still tried once, then the error stands.
    with pytest.raises(PolicyError, match="cannot reach the server"):
        policy.act(policy_input())


def test_400_is_not_sent_to_another_server(server: FakeServer, other: FakeServer) -> None:
    server.script = [error_response(400, "too long")]
    with pytest.raises(PolicyError, match="HTTP 400: too long"):
        make(server, base_urls=[other.url]).act(policy_input())
    assert len(server.requests) == 1 and other.requests == []
    # The request was wrong, not the server: it is not cooling off and takes its turn again.
    policy = make(server, base_urls=[other.url])
    assert [policy.act(policy_input()).meta["server"] for _ in range(2)] == [other.url, server.url]


def test_one_server_is_used_even_while_cooling_off(server: FakeServer) -> None:
    server.script = [error_response(503, "restarting")]
    with pytest.raises(PolicyError, match="HTTP 503: restarting"):
        make(server, max_retries=0).act(policy_input())
    out = make(server, max_retries=0).act(policy_input())
    assert (out.meta["server"], out.meta["attempts"]) == (server.url, 1)


def test_server_list_configuration_errors() -> None:
    with pytest.raises(PolicyError, match="base_urls must be a list"):
        make_policy("openai", base_url="http://a/v1", base_urls="http://b/v1", model="m")
    with pytest.raises(PolicyError, match="base_urls: not an http"):
        make_policy("openai", base_url="http://a/v1", base_urls=["b:8000/v1"], model="m")
    with pytest.raises(PolicyError, match="base_urls: not an http"):
        make_policy("openai", base_url="http://a/v1", base_urls=[None], model="m")
    with pytest.raises(PolicyError, match="base_url must be one URL"):
        make_policy("openai", base_url=["http://a/v1", "http://b/v1"], model="m")
    policy = make_policy(
        "openai", base_url="http://a/v1/", base_urls=["http://a/v1", "http://b/v1/"], model="m"
    )
    assert isinstance(policy, OpenAIPolicy)
    assert policy.base_urls == ("http://a/v1", "http://b/v1")


def test_a_text_only_model_gets_the_prompt_the_local_policy_renders() -> None:
    """Images become "[screenshot WxH]" and the accessibility text follows the last one, as in-process;
    `max_new_tokens` (the local policy's word) sets max_tokens."""
    import io

    from PIL import Image

    from agent_core.policies.local import text_only_messages

    buf = io.BytesIO()
    Image.new("RGB", (64, 40)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    messages = (
        {"role": "system", "content": "You are a GUI agent."},
        {
            "role": "user",
            "content": (
                {"type": "text", "text": "Click OK"},
                {"type": "image_url", "image_url": {"url": url}},
            ),
        },
    )
    obs = Obs(screenshot=b"png", width=64, height=40, a11y='button "OK" @(10,20)')
    inp = PolicyInput(instruction="Click OK", observation=obs, step_index=0, messages=messages)
    policy = OpenAIPolicy(base_url="http://h/v1", model="m", text_only=True, max_new_tokens=24)
    body = policy.request_body(inp)
    assert body["messages"] == text_only_messages(messages, obs.a11y)
    assert (
        body["messages"][1]["content"]
        == 'Click OK\n[screenshot 64x40]\n[accessibility tree]\nbutton "OK" @(10,20)'
    )
    assert body["max_tokens"] == 24
    # Without text_only the images go as they are.
    plain = OpenAIPolicy(base_url="http://h/v1", model="m").request_body(inp)
    assert plain["messages"][1]["content"][1]["type"] == "image_url" and plain["max_tokens"] == 512


def test_a_seeded_policy_asks_each_request_for_the_next_seed_and_a_remade_one_for_the_same(
    server: FakeServer,
) -> None:
    """A local policy's config with `seed` serves as it is (a served twin copies it): request n asks
    the engine for seed + n, so the same policy made again draws the same sequence; retries keep theirs."""
    for _ in range(2):
        policy = make(server, seed=41)
        policy.act(policy_input())
        policy.act(policy_input())
        policy.close()
    assert [r["seed"] for r in server.requests] == [41, 42, 41, 42]
    unseeded = make(server)
    unseeded.act(policy_input())
    assert "seed" not in server.requests[-1]
    for bad in (-1, 1.5, True, "7"):
        with pytest.raises(PolicyError, match="seed must be a whole number"):
            make(server, seed=bad)
