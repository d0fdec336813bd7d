"""A policy served by an OpenAI-compatible chat-completions endpoint (vLLM, SGLang, OpenAI, …).

The agent builds the prompt (`PolicyInput.messages`); this policy sends it, and returns the raw response
text with, where the server gives them, the generated token ids, their logprobs and the prompt's token
ids (vLLM: `logprobs: true` plus `extra_body={"return_token_ids": true}`), which RL training needs.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import httpx

from agent_core.policies.base import Policy, PolicyError, PolicyInput, PolicyOutput, register_policy

# vLLM with --return-tokens-as-token-ids writes each logprob token as "token_id:1234".
_TOKEN_ID_RE = re.compile(r"^token_id:(\d+)$")
_ERROR_CHARS = 500


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


@register_policy("openai")
class OpenAIPolicy(Policy):
    """Chat completions over HTTP; the response text is the agent's to parse."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        timeout_s: float = 120.0,
        coords: str = "smart_resize",
        output_format: str = "uitars",
        logprobs: bool = True,
        top_logprobs: int | None = None,
        max_retries: int = 2,
        retry_backoff_s: float = 1.0,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if not base_url or not model:
            raise PolicyError("openai policy: base_url and model are required")
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise PolicyError(f"openai policy: environment variable {api_key_env} is not set")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.coords = coords
        self.output_format = output_format
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.max_retries = max(0, max_retries)
        self.retry_backoff_s = retry_backoff_s
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:
        # Never the key.
        return f"OpenAIPolicy(base_url={self.base_url!r}, model={self.model!r})"

    def _http(self) -> httpx.Client:
        if self._client is None:
            timeout = httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s))
            self._client = httpx.Client(timeout=timeout, headers=_headers(self._api_key))
        return self._client

    def request_body(self, inp: PolicyInput) -> dict[str, Any]:
        """The JSON body sent for `inp` (extra_body keys are merged in last, as the openai client does)."""
        if not inp.messages:
            raise PolicyError("openai policy: PolicyInput.messages is empty (the agent builds the prompt)")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _jsonable(list(inp.messages)),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.logprobs:
            body["logprobs"] = True
            if self.top_logprobs is not None:
                body["top_logprobs"] = self.top_logprobs
        body.update(_jsonable(self.extra_body))
        return body

    def act(self, inp: PolicyInput) -> PolicyOutput:
        body = self.request_body(inp)
        started = time.monotonic()
        resp, attempts = self._post(body)
        try:
            data = resp.json()
        except ValueError:
            raise PolicyError(
                f"POST {self.url}: malformed JSON in the response: {_truncate(resp.text)}"
            ) from None
        out = parse_chat_completion(data)
        meta = {**out.meta, "latency_ms": int((time.monotonic() - started) * 1000), "attempts": attempts}
        return PolicyOutput(
            text=out.text,
            token_ids=out.token_ids,
            logprobs=out.logprobs,
            prompt_token_ids=out.prompt_token_ids,
            meta=meta,
        )

    def _post(self, body: Mapping[str, Any]) -> tuple[httpx.Response, int]:
        """POST with retries on connection failures, 429 and 5xx (the one place that retries)."""
        content = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                resp = self._http().post(self.url, content=content, headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
                # Nothing was generated (or the connection dropped): safe to send again.
                problem = f"cannot reach the server ({type(exc).__name__}: {exc})"
            except httpx.TimeoutException:
                # A read timeout means the server is slow, not gone: another try would only wait again.
                raise PolicyError(f"POST {self.url}: timed out after {self.timeout_s:g} s") from None
            except httpx.HTTPError as exc:
                raise PolicyError(f"POST {self.url}: {type(exc).__name__}: {exc}") from None
            else:
                if resp.status_code < 300:
                    return resp, attempt
                problem = f"HTTP {resp.status_code}: {_error_text(resp)}"
                # 429 and 5xx: the server is overloaded or restarting, not rejecting the request.
                if resp.status_code != 429 and resp.status_code < 500:
                    raise PolicyError(f"POST {self.url}: {problem}")
                retry_after = _retry_after(resp)
            if attempt > self.max_retries:
                tries = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise PolicyError(f"POST {self.url}: {problem}{tries}")
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
