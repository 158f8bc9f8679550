"""Small helpers shared by several test modules."""

import subprocess

from transformers import AutoTokenizer


def containers_labelled(label: str) -> list[str]:
    """Ids of the containers (running or not) with this label, e.g. `obsspec.pid=123`."""
    result = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def chat_ids(model_dir, text: str) -> list[int]:
    """Token ids of a one-message user chat with the generation prompt, for engine tests."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]
