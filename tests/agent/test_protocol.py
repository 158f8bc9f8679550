import pytest

from obsspec.agent.protocol import (
    CORRECTIVE_OBSERVATIONS,
    SYSTEM_PROMPTS,
    ActionFormat,
    parse_action,
)

MD, HERMES = ActionFormat.markdown, ActionFormat.hermes


@pytest.mark.parametrize(
    ("reply", "kind", "command"),
    [
        ("Let me look.\n```bash\nls -la /srv\n```\nThat lists it.", "command", "ls -la /srv"),
        ("```sh\ncd /tmp\n```", "command", "cd /tmp"),
        ("```\npwd\n```", "command", "pwd"),
        ("First\n```bash\nls\n```\nthen\n```bash\ncat a.txt\n```", "command", "cat a.txt"),
        (
            "```bash\nfor f in *; do\n  echo $f\ndone\n```",
            "command",
            "for f in *; do\n  echo $f\ndone",
        ),
        ("All finished.\n```bash\ndone\n```", "done", ""),
        ("I will run ls", "invalid", ""),
        ("```bash\nls -la", "invalid", ""),  # cut off before the closing fence
        ("```bash\n\n```", "invalid", ""),
    ],
)
def test_markdown_replies(reply, kind, command):
    action = parse_action(reply, MD)
    assert (action.kind, action.command) == (kind, command)


@pytest.mark.parametrize(
    ("reply", "kind", "command"),
    [
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "ls /"}}</tool_call>',
            "command",
            "ls /",
        ),
        ('ok <tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>', "done", ""),
        (
            '<tool_call>{"name": "bash", "arguments": {"command": "a"}}</tool_call>'
            '<tool_call>{"name": "bash", "arguments": {"command": "b"}}</tool_call>',
            "command",
            "b",
        ),
        ("<tool_call>{not json}</tool_call>", "invalid", ""),
        ('<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>', "invalid", ""),
        ("```bash\nls\n```", "invalid", ""),
    ],
)
def test_hermes_replies(reply, kind, command):
    action = parse_action(reply, HERMES)
    assert (action.kind, action.command) == (kind, command)


def test_prompts_explain_their_own_format():
    assert "```bash" in SYSTEM_PROMPTS[MD] and "done" in SYSTEM_PROMPTS[MD]
    assert "<tool_call>" in SYSTEM_PROMPTS[HERMES]
    for fmt in ActionFormat:
        assert parse_action(CORRECTIVE_OBSERVATIONS[fmt], fmt).kind == "invalid"


@pytest.mark.parametrize("fmt", [MD, HERMES])
@pytest.mark.parametrize(
    "command",
    ["ls -la /srv", 'echo "a \\"quoted\\" word" > /tmp/x', "for f in *; do\n  echo $f\ndone"],
)
def test_format_action_is_the_inverse_of_parse_action(fmt, command):
    from obsspec.agent.protocol import Action, format_action

    assert parse_action(format_action(Action("command", command), fmt), fmt) == Action(
        "command", command
    )
    assert parse_action(format_action(Action("done"), fmt), fmt).kind == "done"
