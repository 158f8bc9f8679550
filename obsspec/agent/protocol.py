"""The action protocol: what the policy is told, and how its replies become actions.

Two formats, chosen by config:

markdown (default; small instruct models follow it)
    One shell command per turn in a fenced block:      ```bash
                                                        ls -la /srv
                                                        ```
    When the task is complete, a block holding only:   ```bash
                                                        done
                                                        ```
hermes (Qwen-family chat templates)
    <tool_call>{"name": "bash", "arguments": {"command": "ls -la /srv"}}</tool_call>
    <tool_call>{"name": "done", "arguments": {}}</tool_call>

Parsing rules, for both: text around the action is ignored (chatter is fine); when a reply holds
several actions, the LAST one counts and the others are not run (one command per turn); a
reply with no complete action gets CORRECTIVE_OBSERVATION, a fixed text, and counts as a turn.
A block's whole content is one command, so a multi-line script is one command.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class ActionFormat(StrEnum):
    markdown = "markdown"
    hermes = "hermes"


@dataclass(frozen=True)
class Action:
    kind: Literal["command", "done", "invalid"]
    command: str = ""
    error: str = ""  # why a reply is invalid (for logs; the policy sees the fixed corrective)


DONE_WORD = "done"  # `done` alone is a bash syntax error, so it cannot be a real command
FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

SYSTEM_PROMPTS = {
    ActionFormat.markdown: (
        "You are an expert Linux user working in a bash terminal, as root, to complete a task.\n"
        "Each turn, reply with exactly one shell command in a ```bash code block; you will "
        "then see its output and exit code. Run one command per turn.\n"
        "When the task is complete, reply with a code block that contains only the word "
        "done:\n```bash\ndone\n```"
    ),
    ActionFormat.hermes: (
        "You are an expert Linux user working in a bash terminal, as root, to complete a task.\n"
        "You have two tools. Call exactly one per turn, as\n"
        '<tool_call>{"name": "bash", "arguments": {"command": "<one shell command>"}}'
        "</tool_call>\nto run a command and see its output and exit code, or\n"
        '<tool_call>{"name": "done", "arguments": {}}</tool_call>\n'
        "when the task is complete."
    ),
}

CORRECTIVE_OBSERVATIONS = {
    ActionFormat.markdown: (
        "No command found. Reply with exactly one shell command in a ```bash code block, or "
        "with a block containing only the word done when the task is complete."
    ),
    ActionFormat.hermes: (
        "No tool call found. Call the bash tool with one shell command, as the system "
        "message shows, or call the done tool when the task is complete."
    ),
}


def observation_role(fmt: ActionFormat) -> str:
    """The chat role observations are sent as: tool results for tool calls, else the user."""
    return "tool" if fmt == ActionFormat.hermes else "user"


def task_prompt(instruction: str) -> str:
    return f"Task:\n{instruction.strip()}"


def format_action(action: Action, fmt: ActionFormat) -> str:
    """The reply a well-behaved policy gives for action: the inverse of parse_action."""
    if action.kind == "invalid":
        raise ValueError("an invalid action has no well-formed reply")
    if fmt == ActionFormat.markdown:
        body = DONE_WORD if action.kind == "done" else action.command
        return f"```bash\n{body}\n```"
    if action.kind == "done":
        call = {"name": DONE_WORD, "arguments": {}}
    else:
        call = {"name": "bash", "arguments": {"command": action.command}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def parse_action(reply: str, fmt: ActionFormat) -> Action:
    return parse_markdown(reply) if fmt == ActionFormat.markdown else parse_hermes(reply)


def parse_markdown(reply: str) -> Action:
    blocks = FENCE.findall(reply)
    if not blocks:
        return Action("invalid", error="no complete ```bash block")
    command = blocks[-1].strip()
    if not command:
        return Action("invalid", error="the last code block is empty")
    if command == DONE_WORD:
        return Action("done")
    return Action("command", command=command)


def parse_hermes(reply: str) -> Action:
    calls = TOOL_CALL.findall(reply)
    if not calls:
        return Action("invalid", error="no complete <tool_call>")
    try:
        call = json.loads(calls[-1])
        name = call["name"]
        arguments = call.get("arguments") or {}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        return Action("invalid", error=f"the last tool call is not valid JSON with a name: {e}")
    if name == DONE_WORD:
        return Action("done")
    command = arguments.get("command") if isinstance(arguments, dict) else None
    if name != "bash" or not isinstance(command, str) or not command.strip():
        return Action("invalid", error=f"unknown tool {name!r} or no command")
    return Action("command", command=command.strip())
