"""Small helpers shared by several test modules."""

from transformers import AutoTokenizer


def chat_ids(model_dir, text: str) -> list[int]:
    """Token ids of a one-message user chat with the generation prompt, for engine tests."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]
