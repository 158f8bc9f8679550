"""The world model's prompt and target, shared by training and serving (the same bytes).

    prompt = policy context up to and including the action
             + the end-of-turn token (when the action was cut off before it)
             + the chat-template text that opens an observation
    target = the canonical observation's tokens + the end-of-turn token

So the world model continues the policy's own conversation exactly where the real
observation would appear, and stops where the observation would end. Policy and world model
must share a tokenizer (the same ids mean the same text); `check_same_tokenizer` says so
clearly when they do not.

Each turn's prompt is a prefix of the next turn's (the policy's context grows by appending,
and the opening is the start of the observation's ids), so an engine with prefix caching
prefills only the new tokens. One exception: an observation that begins with a run of
whitespace (`uniq -c`, `wc` of several files) may be tokenised together with the opening's
last newline, so the next prompt shares all but that last token (prefix caching then loses
at most one block). Opening the observation elsewhere would change the bytes trained on.
"""

from __future__ import annotations

from obsspec.agent.context import ChatContextBuilder
from obsspec.errors import ConfigError


class WorldModelPrompt:
    def __init__(self, builder: ChatContextBuilder) -> None:
        self.builder = builder
        self.opening_ids = builder.encode(builder.template.before)
        self.end_id = builder.end_of_turn_id

    def prompt_ids(self, context_ids: list[int] | tuple[int, ...]) -> list[int]:
        """context_ids end with the action's generated ids."""
        ids = list(context_ids)
        return ids + self.builder.turn_end_ids(ids) + self.opening_ids

    def target_ids(self, observation: str) -> list[int]:
        return [*self.builder.encode(observation), self.end_id]

    def observation_text(self, generated_ids: list[int]) -> str | None:
        """The predicted observation, or None when generation stopped before its end."""
        if not generated_ids or generated_ids[-1] != self.end_id:
            return None
        return self.builder.tokenizer.decode(generated_ids[:-1])


def check_same_tokenizer(policy_tokenizer, wm_tokenizer, *, policy: str, wm: str) -> None:
    if policy_tokenizer.get_vocab() != wm_tokenizer.get_vocab():
        raise ConfigError(
            f"the world model {wm} and the policy {policy} use different tokenizers; "
            "speculation compares exact tokens, so they must share one"
        )
