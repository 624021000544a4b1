"""The proxy brain: forwards each request to a real model endpoint and passes its answer back.

The endpoint is a base URL (``https://api.example.com``) to which the request's own path
(``/v1/responses``, ``/v1/messages?beta=true``, ``/v1/chat/completions``) is appended, so one
proxy serves whichever protocol the runtime speaks, provided the endpoint speaks it too. The
key is read from the environment variable NAMED by ``key_env`` at each request — it is never
taken as a value, never put on a command line, and never written to the audit log (which
holds digests of the bodies only). The runtime's own dummy key is replaced: Anthropic
requests carry ``x-api-key``, OpenAI ones ``Authorization: Bearer``.

The answer is read whole before it is passed on (a streamed answer arrives all at once), so
the audit log can record the digest of exactly what the runtime received.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from oracle.agents.model_server.brain import Brain, BrainError, ModelRequest
from oracle.agents.model_server.wire import Reply

__all__ = ["ProxyBrain"]

#: request headers passed through to the endpoint (besides the key, which is replaced)
_PASS = ("content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta",
         "session-id", "x-claude-code-session-id")


class ProxyBrain(Brain):
    """Forward to ``url``, authenticating with the key in environment variable ``key_env``."""

    name = "proxy"

    def __init__(self, url: str, key_env: str | None = None, timeout_s: float = 600.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"proxy brain: url must be http(s)://host[:port][/prefix], "
                             f"got {url!r}")
        if key_env is not None and (not key_env or "=" in key_env):
            raise ValueError("proxy brain: key_env is the NAME of an environment variable, "
                             f"got {key_env!r}")
        self.url = url.rstrip("/")
        self.key_env = key_env
        self.timeout_s = timeout_s
        # no proxy handler: the endpoint is reached directly, whatever *_PROXY says
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def respond(self, request: ModelRequest) -> Reply:
        headers = {k: v for k, v in request.headers.items() if k in _PASS}
        headers.setdefault("content-type", "application/json")
        if self.key_env is not None:
            key = os.environ.get(self.key_env)
            if not key:
                raise BrainError(f"proxy brain: environment variable {self.key_env} is not set")
            if request.protocol == "anthropic-messages":
                headers["x-api-key"] = key
            else:
                headers["authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.url + request.path, data=request.raw,
                                     headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout_s) as resp:
                return Reply(resp.read(), resp.headers.get("content-type", "application/json"),
                             resp.status)
        except urllib.error.HTTPError as exc:  # the endpoint's own error goes back as is
            return Reply(exc.read(), exc.headers.get("content-type", "application/json"),
                         exc.code)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BrainError(f"proxy brain: {self.url} unreachable: {reason}") from None
