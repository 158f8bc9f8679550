"""Exact-token contexts with the real tokenizer of the default model."""

import pytest

from obsspec.agent.context import ChatContextBuilder, TokenContext


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
