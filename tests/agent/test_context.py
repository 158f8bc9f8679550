"""Exact-token contexts with the real tokenizer of the default model."""

import copy

import pytest

from obsspec.agent.context import ChatContextBuilder, TokenContext
from obsspec.agent.episode import EpisodeLimits, context_builder
from obsspec.errors import ConfigError


def test_context_equals_the_rendered_conversation(tokenizer):
    builder = ChatContextBuilder(tokenizer)
    context = TokenContext()
    context.extend(builder.prompt_ids("sys prompt", "Task: list files"), generated=False)
    replies = ["```bash\nls -la\n```", "```bash\ndone\n```"]
    observations = ["total 0\n[exit code: 0]", "(no output)\n[exit code: 0]"]
    messages = [
        {"role": "system", "content": "sys prompt"},
        {"role": "user", "content": "Task: list files"},
    ]
    for reply, obs in zip(replies, observations, strict=True):
        generated = [*builder.encode(reply), builder.end_of_turn_id]  # as a model stops
        context.extend(generated, generated=True, logprobs=[-0.5] * len(generated))
        context.extend(builder.turn_end_ids(generated), generated=False)
        context.extend(builder.observation_ids(obs), generated=False)
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": obs}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(context.ids) == rendered
    policy_ids = [i for i, m in zip(context.ids, context.mask, strict=True) if m]
    assert tokenizer.decode(policy_ids) == "".join(r + "<|im_end|>" for r in replies)
    assert [lp is None for lp in context.logprobs] == [m == 0 for m in context.mask]


def test_cut_off_reply_gets_the_end_of_turn_token(tokenizer):
    builder = ChatContextBuilder(tokenizer)
    cut = builder.encode("```bash\nls -")
    assert builder.turn_end_ids(cut) == [builder.end_of_turn_id]
    assert builder.turn_end_ids([*cut, builder.end_of_turn_id]) == []


def test_generated_ids_need_logprobs():
    with pytest.raises(ValueError, match="logprob"):
        TokenContext().extend([1, 2], generated=True, logprobs=[0.0])


def test_hermes_observations_use_the_tool_role(tokenizer):
    from obsspec.agent.protocol import ActionFormat, observation_role

    builder = ChatContextBuilder(tokenizer, observation_role(ActionFormat.hermes))
    text = tokenizer.decode(builder.observation_ids("out\n[exit code: 0]"))
    assert text == "\n<|im_start|>tool\nout\n[exit code: 0]<|im_end|>\n<|im_start|>assistant\n"


# A ChatML template that, like Qwen3's, thinks unless told `enable_thinking=false`: then its
# generation prompt carries an empty thought.
THINKING_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}"
)
NO_THINKING = {"enable_thinking": False}


def with_template(tokenizer, template: str):
    """A copy of tokenizer with another chat template (the session's stays as it is)."""
    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    return other


def test_a_kwarg_the_template_ignores_is_an_error(tokenizer):
    """SmolLM2's template knows no enable_thinking: it must not pass as if it did."""
    with pytest.raises(ConfigError, match=r"ignores 'enable_thinking'") as info:
        ChatContextBuilder(tokenizer, chat_template_kwargs=NO_THINKING)
    assert "limits.chat_template_kwargs" in str(info.value) and info.value.hint
    thinking = with_template(tokenizer, THINKING_TEMPLATE)
    with pytest.raises(ConfigError, match=r"ignores 'enable_thiking'"):  # a misspelt second key
        ChatContextBuilder(thinking, chat_template_kwargs=NO_THINKING | {"enable_thiking": 0})


def test_kwargs_reach_the_prompt_and_every_observation(tokenizer):
    """Each generation prompt the policy is given carries the kwargs' empty thought. (The
    context is not a re-rendering of the whole conversation: a thinking template drops the
    thoughts of past turns, which is why the context is appended to, never re-rendered.)"""
    thinking = with_template(tokenizer, THINKING_TEMPLATE)
    builder = context_builder(thinking, EpisodeLimits(chat_template_kwargs=NO_THINKING))
    plain = ChatContextBuilder(thinking)
    system_and_task = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Task: list files"},
    ]
    prompt = thinking.apply_chat_template(
        system_and_task, add_generation_prompt=True, tokenize=False, enable_thinking=False
    )
    context = builder.prompt_ids("sys", "Task: list files")
    assert thinking.decode(context) == prompt and prompt.endswith("<think>\n\n</think>\n\n")
    reply = "```bash\nls\n```"
    context += [*builder.encode(reply), builder.end_of_turn_id, *builder.observation_ids("a")]
    assert thinking.decode(context) == (
        f"{prompt}{reply}<|im_end|>\n<|im_start|>user\na<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert "<think>" not in thinking.decode(plain.prompt_ids("sys", "Task: list files"))
    assert "<think>" not in plain.template.after
    # The world model writes the observation's opening itself: the kwargs leave it alone.
    assert builder.template.before == plain.template.before


def test_kwargs_that_change_the_observations_opening_are_refused(tokenizer):
    shouting = with_template(
        tokenizer,
        "{% for m in messages %}{{ '<|im_start|>' + (m.role | upper if loud else m.role) + "
        "'\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    )
    with pytest.raises(ConfigError, match="opens an observation"):
        ChatContextBuilder(shouting, chat_template_kwargs={"loud": True})


def test_limits_without_kwargs_dump_as_before_the_setting_existed():
    """A run's identity holds its limits: older runs must keep theirs to resume."""
    assert "chat_template_kwargs" not in EpisodeLimits().model_dump(mode="json")
    limits = EpisodeLimits(chat_template_kwargs=NO_THINKING)
    assert limits.model_dump(mode="json")["chat_template_kwargs"] == {"enable_thinking": False}
    assert EpisodeLimits.model_validate(limits.model_dump(mode="json")) == limits
