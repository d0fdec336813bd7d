"""A policy served by an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, OpenAI, …).

The agent builds the prompt (`PolicyInput.messages`); this policy sends it, and returns the raw response
text with, where the server gives them, the generated token ids, their logprobs and the prompt's token
ids (vLLM: `logprobs: true` plus `extra_body={"return_token_ids": true}`), which RL training needs.

Several servers may serve the same model (`base_urls` beside `base_url`): each request goes to the one
with the fewest requests in flight from this process, and a server that fails (unreachable, timed out,
429/5xx after the retries) sits out a cool-off while the request is sent once more to another.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agent_core.policies.base import Policy, PolicyError, PolicyInput, PolicyOutput, register_policy
from agent_core.policies.local import text_only_messages
from agent_core.prompt_families import PromptError, check_prompt, prompt_family

# vLLM with --return-tokens-as-token-ids writes each logprob token as "token_id:1234".
_TOKEN_ID_RE = re.compile(r"^token_id:(\d+)$")
_ERROR_CHARS = 500
# How long a server that failed is passed over when another can take the request.
COOL_OFF_S = 30.0


class _ServerFailed(PolicyError):
    """The server, not the request, failed (unreachable, timed out, 429/5xx after the retries)."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class _Servers:
    """Requests in flight and cool-offs per server, for every OpenAIPolicy of the process: policies are
    made per episode and per rollout thread, so only a count shared by all of them sees the load."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._down_until: dict[str, float] = {}
        self._picks = 0
        self._last_pick: dict[str, int] = {}

    def acquire(self, urls: Sequence[str], exclude: Sequence[str] = ()) -> str | None:
        """The least busy server of `urls` not in `exclude` (ties: the least recently picked), counted
        in flight until `release`. Servers cooling off are passed over; on a first pick (no `exclude`)
        when all are cooling off, one is tried anyway; on a failover, None."""
        with self._lock:
            now = time.monotonic()
            pool = [u for u in urls if u not in exclude]
            up = [u for u in pool if self._down_until.get(u, 0.0) <= now]
            choices = up or ([] if exclude else pool)
            if not choices:
                return None
            url = min(choices, key=lambda u: (self._in_flight.get(u, 0), self._last_pick.get(u, -1)))
            self._picks += 1
            self._last_pick[url] = self._picks
            self._in_flight[url] = self._in_flight.get(url, 0) + 1
            return url

    def release(self, url: str) -> None:
        with self._lock:
            self._in_flight[url] -= 1

    def mark_down(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + COOL_OFF_S

    def in_flight(self, url: str) -> int:
        with self._lock:
            return self._in_flight.get(url, 0)

    def reset(self) -> None:
        """Forget every count and cool-off (tests)."""
        with self._lock:
            self._in_flight.clear()
            self._down_until.clear()
            self._last_pick.clear()


SERVERS = _Servers()


def _truncate(text: str, limit: int = _ERROR_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def _jsonable(value: Any) -> Any:
    """Mappings and tuples (the frozen prompt) as plain dicts and lists, so json.dumps takes them."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _error_text(resp: httpx.Response) -> str:
    """The server's error message: OpenAI's {"error": {"message"}}, vLLM's {"message"}, or the body."""
    try:
        body = resp.json()
    except ValueError:
        return _truncate(resp.text)
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping) and err.get("message"):
            return _truncate(str(err["message"]))
        if isinstance(err, str) and err:
            return _truncate(err)
        if body.get("message"):
            return _truncate(str(body["message"]))
    return _truncate(resp.text)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _int_tuple(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return None


def _content_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts; None is ""."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _parse_logprobs(choice: Mapping[str, Any]) -> tuple[tuple[float, ...] | None, tuple[int, ...] | None]:
    """(logprobs, token ids spelled as "token_id:N") from `choice.logprobs.content`, where present."""
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, Mapping) else None
    if not isinstance(content, list):
        return None, None
    values: list[float] = []
    ids: list[int] = []
    for item in content:
        if not isinstance(item, Mapping) or not isinstance(item.get("logprob"), int | float):
            # A token without a logprob (vLLM omits it when the sampled token fell outside the returned
            # set) makes the sequence unusable for training: report none rather than a misaligned one.
            return None, None
        values.append(float(item["logprob"]))
        m = _TOKEN_ID_RE.match(str(item.get("token", "")))
        if m:
            ids.append(int(m.group(1)))
    return tuple(values), (tuple(ids) if len(ids) == len(values) and ids else None)


def parse_chat_completion(data: Any) -> PolicyOutput:
    """A chat-completions response body as a PolicyOutput; raises PolicyError when it has no choice."""
    if not isinstance(data, Mapping):
        raise PolicyError(f"chat completions: expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise PolicyError(f"chat completions: no choices in the response: {_truncate(json.dumps(data))}")
    choice = choices[0]
    message = choice.get("message")
    message = message if isinstance(message, Mapping) else {}
    logprobs, ids_from_logprobs = _parse_logprobs(choice)
    token_ids = _int_tuple(choice.get("token_ids")) or ids_from_logprobs
    # vLLM puts prompt_token_ids on the response; some servers put it on the choice.
    prompt_ids = _int_tuple(data.get("prompt_token_ids")) or _int_tuple(choice.get("prompt_token_ids"))
    meta: dict[str, Any] = {
        "finish_reason": choice.get("finish_reason"),
        "model": data.get("model"),
        "id": data.get("id"),
    }
    if isinstance(data.get("usage"), Mapping):
        meta["usage"] = dict(data["usage"])
    if choice.get("stop_reason") is not None:
        meta["stop_reason"] = choice["stop_reason"]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        meta["reasoning"] = reasoning
    return PolicyOutput(
        text=_response_text(message),
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_token_ids=prompt_ids,
        meta=meta,
    )


def _response_text(message: Mapping[str, Any]) -> str:
    """The text the agent parses: the content, or, when a server's tool-call parser took the calls out of
    the content into `tool_calls`, the message as JSON (the `tool_calls` output format reads that form)."""
    text = _content_text(message.get("content"))
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return text
    return json.dumps({"role": "assistant", "content": text, "tool_calls": calls}, ensure_ascii=False)


def list_models(base_url: str, api_key: str | None = None, timeout: float = 5.0) -> list[str]:
    """The model ids the server serves (GET /models); raises PolicyError when it cannot tell."""
    url = base_url.rstrip("/") + "/models"
    try:
        resp = httpx.get(url, headers=_headers(api_key), timeout=timeout)
    except httpx.HTTPError as exc:
        raise PolicyError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    if resp.status_code >= 400:
        raise PolicyError(f"GET {url}: HTTP {resp.status_code}: {_error_text(resp)}")
    try:
        data = resp.json()
        return [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise PolicyError(f"GET {url}: unexpected response ({exc}): {_truncate(resp.text)}") from None


def _server_urls(base_url: Any, base_urls: Any) -> tuple[str, ...]:
    """`base_url` then `base_urls` (each an http(s) URL), without trailing slashes, duplicates dropped."""
    if not isinstance(base_url, str):
        raise PolicyError(f"openai policy: base_url must be one URL (more go in base_urls), got {base_url!r}")
    if base_urls is None:
        base_urls = []
    if isinstance(base_urls, str) or not isinstance(base_urls, Sequence):
        raise PolicyError(f"openai policy: base_urls must be a list of URLs, got {base_urls!r}")
    urls = [base_url.rstrip("/")]
    for url in base_urls:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise PolicyError(f"openai policy: base_urls: not an http(s) URL: {url!r}")
        if url.rstrip("/") not in urls:
            urls.append(url.rstrip("/"))
    return tuple(urls)


@register_policy("openai")
class OpenAIPolicy(Policy):
    """Chat completions over HTTP; the response text is the agent's to parse."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        base_urls: Sequence[str] | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        timeout_s: float = 120.0,
        coords: str | None = None,
        output_format: str | None = None,
        prompt: str | None = None,
        logprobs: bool = True,
        top_logprobs: int | None = None,
        max_retries: int = 2,
        retry_backoff_s: float = 1.0,
        extra_body: Mapping[str, Any] | None = None,
        text_only: bool = False,
        max_new_tokens: int | None = None,
        seed: int | None = None,
    ) -> None:
        if not base_url or not model:
            raise PolicyError("openai policy: base_url and model are required")
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise PolicyError(f"openai policy: environment variable {api_key_env} is not set")
        self.base_urls = _server_urls(base_url, base_urls)
        """Every server the requests are spread over, `base_url` first."""
        self.base_url = self.base_urls[0]
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.temperature = temperature
        # `max_new_tokens` is the local policy's word for it: one config reads the same on either.
        self.max_tokens = int(max_new_tokens) if max_new_tokens is not None else max_tokens
        self.timeout_s = timeout_s
        try:  # a prompt family asks for one output format: a policy writing another is refused now
            self.prompt, self.output_format = check_prompt(prompt, output_format)
        except PromptError as exc:
            raise PromptError(f"openai policy: {exc}") from None
        # No checkpoint here to read the space off: as given, else the family's models' own.
        self.coords = coords or prompt_family(self.prompt).coords
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.max_retries = max(0, max_retries)
        self.retry_backoff_s = retry_backoff_s
        self.extra_body = dict(extra_body or {})
        self.text_only = bool(text_only)
        """A text-only model: its prompt is rendered as the local policy renders it (each image as
        "[screenshot WxH]", the observation's accessibility text after the last one), so the engine and
        an in-process model (and a trainer rebuilding the prompt) read the same tokens."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise PolicyError(f"openai policy: seed must be a whole number >= 0, got {seed!r}")
        self.seed = seed
        """As the local policy's: a policy made with a seed draws the same sequence again. Request n of
        this policy asks the engine for seed + n (vLLM seeds that request's sampler with it)."""
        self._requests = 0
        self._api_key = api_key
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        # Never the key.
        more = f", base_urls={list(self.base_urls[1:])!r}" if len(self.base_urls) > 1 else ""
        return f"OpenAIPolicy(base_url={self.base_url!r}{more}, model={self.model!r})"

    def _http(self) -> httpx.Client:
        if self._client is None:
            timeout = httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s))
            self._client = httpx.Client(timeout=timeout, headers=_headers(self._api_key))
        return self._client

    def request_body(self, inp: PolicyInput) -> dict[str, Any]:
        """The JSON body sent for `inp` (extra_body keys are merged in last, as the openai client does)."""
        if not inp.messages:
            raise PolicyError("openai policy: PolicyInput.messages is empty (the agent builds the prompt)")
        messages: Any = list(inp.messages)
        if self.text_only:
            messages = text_only_messages(inp.messages, inp.observation.a11y)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _jsonable(messages),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.logprobs:
            body["logprobs"] = True
            if self.top_logprobs is not None:
                body["top_logprobs"] = self.top_logprobs
        if self.seed is not None:
            body["seed"] = (self.seed + self._requests) % 2**31
            self._requests += 1
        body.update(_jsonable(self.extra_body))
        return body

    def act(self, inp: PolicyInput) -> PolicyOutput:
        body = self.request_body(inp)
        started = time.monotonic()
        resp, attempts, server = self._post(body)
        try:
            data = resp.json()
        except ValueError:
            raise PolicyError(
                f"POST {server}/chat/completions: malformed JSON in the response: {_truncate(resp.text)}"
            ) from None
        out = parse_chat_completion(data)
        latency_ms = int((time.monotonic() - started) * 1000)
        meta = {**out.meta, "latency_ms": latency_ms, "attempts": attempts, "server": server}
        return PolicyOutput(
            text=out.text,
            token_ids=out.token_ids,
            logprobs=out.logprobs,
            prompt_token_ids=out.prompt_token_ids,
            meta=meta,
        )

    def _post(self, body: Mapping[str, Any]) -> tuple[httpx.Response, int, str]:
        """(response, attempts, server): the least busy server's answer; when that server fails, it
        cools off and the request goes once more to another server that is not cooling off."""
        content = json.dumps(body).encode()
        first = self._acquire()
        try:
            resp, attempts = self._post_to(first, content)
            return resp, attempts, first
        except _ServerFailed as exc:
            SERVERS.mark_down(first)
            failed = exc
        finally:
            SERVERS.release(first)
        other = SERVERS.acquire(self.base_urls, exclude=(first,))
        if other is None:  # no other server is up: the failure stands, as with one server
            raise PolicyError(str(failed)) from None
        try:
            resp, attempts = self._post_to(other, content)
            return resp, failed.attempts + attempts, other
        except _ServerFailed as exc:
            SERVERS.mark_down(other)
            raise PolicyError(f"{exc}; before that: {failed}") from None
        finally:
            SERVERS.release(other)

    def _acquire(self) -> str:
        server = SERVERS.acquire(self.base_urls)
        assert server is not None  # a first pick always gets one
        return server

    def _post_to(self, server: str, content: bytes) -> tuple[httpx.Response, int]:
        """POST to one server with retries on connection failures, 429 and 5xx (the one place that
        retries); raises _ServerFailed when the server, not the request, is at fault."""
        url = server + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                resp = self._http().post(url, content=content, headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
                # Nothing was generated (or the connection dropped): safe to send again.
                problem = f"cannot reach the server ({type(exc).__name__}: {exc})"
            except httpx.TimeoutException:
                # A read timeout means the server is slow, not gone: another try would only wait again.
                raise _ServerFailed(f"POST {url}: timed out after {self.timeout_s:g} s", attempt) from None
            except httpx.TransportError as exc:  # reset mid-read, …: the server's side
                raise _ServerFailed(f"POST {url}: {type(exc).__name__}: {exc}", attempt) from None
            except httpx.HTTPError as exc:
                raise PolicyError(f"POST {url}: {type(exc).__name__}: {exc}") from None
            else:
                if resp.status_code < 300:
                    return resp, attempt
                problem = f"HTTP {resp.status_code}: {_error_text(resp)}"
                # 429 and 5xx: the server is overloaded or restarting, not rejecting the request.
                if resp.status_code != 429 and resp.status_code < 500:
                    raise PolicyError(f"POST {url}: {problem}")
                retry_after = _retry_after(resp)
            if attempt > self.max_retries:
                tries = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise _ServerFailed(f"POST {url}: {problem}{tries}", attempt)
            backoff = self.retry_backoff_s * 2 ** (attempt - 1)
            time.sleep(min(retry_after, 30.0) if retry_after is not None else backoff)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _retry_after(resp: httpx.Response) -> float | None:
    """The Retry-After header in seconds, when it is a number."""
    try:
        return max(0.0, float(resp.headers.get("retry-after", "")))
    except ValueError:
        return None
