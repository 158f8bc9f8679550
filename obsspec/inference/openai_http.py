"""An Engine over any OpenAI-compatible completions server (e.g. `vllm serve`).

Contexts stay exact: prompts are sent as token ids, and the reply's token ids come back
(`return_token_ids`, a vLLM extension; servers without it are refused with a clear error
rather than re-tokenising text). Per-token logprobs are requested too. Cancelling the awaiting
task closes the HTTP request, which makes vLLM abort the request. Load comes from the
server's Prometheus metrics, polled in the background.

Requests carry priorities (speculative guesses wait behind real turns), but vLLM honours them
only when started with `--scheduling-policy priority`; under its default first-come-first-
served policy it ignores them without an error. `scheduling_policy()` asks the server (vLLM's
`/server_info`, a development endpoint: VLLM_SERVER_DEV_MODE=1, which reloading weights
needs as well) so that a session can refuse a server that would ignore them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from pathlib import Path

from obsspec.errors import ContextLengthError, EngineError
from obsspec.inference.base import (
    SCORE_PRIORITY,
    EngineStats,
    Generation,
    GenerationProgress,
    Sampling,
    Timings,
    retried,
)

METRIC = re.compile(r"^vllm:num_requests_(running|waiting)\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE)


class OpenAIEngine:
    """An Engine over the completions API of the server at base_url serving `model`; an async
    context manager that checks the server answers and serves it."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        poll_s: float = 1.0,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0)
        )
        self.poll_s = poll_s
        self.weight_version = 0
        self._running = self._waiting = 0
        self._poller: asyncio.Task | None = None

    async def __aenter__(self) -> OpenAIEngine:
        await self.check()
        self._poller = asyncio.create_task(self._poll_load())
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def check(self) -> None:
        """The server answers and serves self.model."""
        try:
            response = await self._http.get("/v1/models")
            response.raise_for_status()
        except Exception as e:
            raise EngineError(
                f"no OpenAI-compatible server answers at {self.base_url}: {e}",
                hint="start one, e.g. `vllm serve MODEL`",
            ) from e
        served = [m["id"] for m in response.json().get("data", [])]
        if self.model not in served:
            raise EngineError(f"{self.base_url} serves {served}, not {self.model!r}")

    async def scheduling_policy(self) -> str | None:
        """How the server orders waiting requests ('priority', 'fcfs'), or None when it does
        not say (not vLLM, or vLLM without its development endpoints)."""
        try:
            response = await self._http.get("/server_info", params={"config_format": "json"})
            if response.status_code != 200:
                return None
            policy = response.json()["vllm_config"]["scheduler_config"]["policy"]
        except Exception:  # an answer we cannot read says nothing either way
            return None
        return str(policy) if policy else None

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        *,
        request_id: str | None = None,
        priority: int = 0,
        progress: GenerationProgress | None = None,
    ) -> Generation:
        """Not streamed: `progress` learns the token count only when the reply is complete."""
        body = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "request_id": request_id or uuid.uuid4().hex,
            "priority": priority,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.ignore_eos:
            body["ignore_eos"] = True  # a vLLM extension of the completions API
        start = time.monotonic()
        response = await self._post(body)
        choice = response["choices"][0]
        ids = choice.get("token_ids")
        if ids is None:
            raise EngineError(
                f"{self.base_url} does not return token ids (return_token_ids); "
                "exact contexts need a vLLM-compatible server"
            )
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or [0.0] * len(ids)
        total = time.monotonic() - start
        if progress is not None:
            progress.tokens = len(ids)
        return Generation(
            list(ids),
            [float(x or 0.0) for x in logprobs],
            choice["text"],
            choice.get("finish_reason") or "abort",
            Timings(0.0, 0.0, 0.0, total),
            self.weight_version,
        )

    async def score(self, token_ids: list[int]) -> list[float | None]:
        """The log-probability the served weights give each token after its prefix (None for
        the first), from vLLM's `prompt_logprobs` extension of the completions API; a server
        without it is refused with an EngineError rather than guessed at."""
        if not token_ids:
            raise EngineError("score needs at least one token")
        body = {
            "model": self.model,
            "prompt": list(token_ids),
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,  # the prompt's own tokens only
            "priority": SCORE_PRIORITY,
        }
        choice = (await self._post(body))["choices"][0]
        steps = choice.get("prompt_logprobs")
        if steps is None or len(steps) != len(token_ids):
            raise EngineError(
                f"{self.base_url} does not return prompt logprobs (prompt_logprobs, a vLLM "
                "extension of the completions API); scoring needs a vLLM server"
            )
        return [
            None if step is None else float(step[str(token)]["logprob"])
            for step, token in zip(steps, token_ids, strict=True)
        ]

    async def _post(self, body: dict) -> dict:
        import httpx

        try:
            response = await self._http.post("/v1/completions", json=body)
        except httpx.HTTPError as e:
            raise EngineError(f"the server at {self.base_url} failed: {e!r}") from e
        if response.status_code == 400 and "maximum" in response.text and "length" in response.text:
            raise ContextLengthError(f"the server refused the context: {response.text[:300]}")
        if response.status_code != 200:
            raise EngineError(f"the server answered {response.status_code}: {response.text[:300]}")
        return response.json()

    async def _poll_load(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # load is advisory; never fail a run on it
                text = (await self._http.get("/metrics")).text
                values = {kind: float(v) for kind, v in METRIC.findall(text)}
                self._running = int(values.get("running", 0))
                self._waiting = int(values.get("waiting", 0))
            await asyncio.sleep(self.poll_s)

    def stats(self) -> EngineStats:
        return EngineStats(self._running, self._waiting, self.weight_version)

    async def load_weights(self, checkpoint: Path, version: int) -> None:
        """Needs a vLLM server started with VLLM_SERVER_DEV_MODE=1 (its /collective_rpc)."""
        from obsspec.inference.weight_loading import stale_tied_output

        if stale_tied_output(checkpoint):
            raise EngineError(
                f"{checkpoint} saves its tied output layer only inside the embedding, and "
                "vLLM's in-place reload through a server would leave the served output layer "
                "on the old weights (no error from vLLM)",
                hint="save lm_head.weight into the directory too, or use the in-process "
                "engine, which sends it",
            )
        response = await self._http.post(
            "/collective_rpc",
            json={"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}},
        )
        if response.status_code != 200:
            raise EngineError(
                f"{self.base_url} cannot reload weights ({response.status_code}); "
                "start vLLM with VLLM_SERVER_DEV_MODE=1, or use the in-process "
                "engine"
            )
        # As the in-process engine does: cached prefixes hold keys and values the old weights
        # computed, and a prompt that hit them would be continued from the old model's state.
        await self.reset_prefix_cache()
        self.weight_version = version

    async def reset_prefix_cache(self, attempts: int = 20, wait_s: float = 0.25) -> None:
        """Drop the server's cached prefixes. vLLM refuses (success false) while running
        requests hold blocks, so it is retried for a while (`retried`), then an EngineError."""

        async def reset() -> bool:
            response = await self._http.post("/reset_prefix_cache")
            if response.status_code != 200:
                raise EngineError(
                    f"{self.base_url} cannot reset its prefix cache ({response.status_code}): "
                    "the reloaded weights would be continued from the old ones' cached state",
                    hint="start vLLM with VLLM_SERVER_DEV_MODE=1",
                )
            return bool(response.json().get("success"))

        if await retried(reset, attempts, wait_s):
            return
        raise EngineError(
            f"{self.base_url} kept refusing to reset its prefix cache (requests still running "
            f"after {attempts * wait_s:.0f} s); the reloaded weights would be continued from "
            "the old ones' cached state"
        )

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        await self._http.aclose()
