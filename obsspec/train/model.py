"""Loading a causal LM for training, and the loss on labelled tokens only.

The loss projects only the labelled positions through the output layer: with a 49k-token
vocabulary the full logits of every position would dominate memory and time, while the
labels (observation or action tokens) are a fraction of each sequence.
"""

from __future__ import annotations

from pathlib import Path

import torch

from obsspec.errors import ConfigError
from obsspec.train.config import LoraSettings
from obsspec.train.precision import Placement
from obsspec.train.sequences import Sequence


def is_peft(model) -> bool:
    return type(model).__module__.startswith("peft")


def load_model(path: Path, where: Placement, lora: LoraSettings | None):
    """Float32 master weights on the device; LoRA adapters wrapped in when asked for."""
    from transformers import AutoModelForCausalLM

    from obsspec.models.convert import quiet_transformers
    from obsspec.models.weights import check_weights

    check_weights(path)  # a damaged file is named, not an error from inside transformers
    quiet_transformers()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.to(where.device)
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=lora.rank,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.targets,
            task_type="CAUSAL_LM",
        )
        try:
            model = get_peft_model(model, config)
        except ValueError as e:  # peft: target modules not found in the model
            raise ConfigError(f"--lora: {e}") from e
    return model


def batch_tensors(sequences: list[Sequence], pad_id: int, device: str):
    """input_ids, attention_mask and the label weights (0: not learned), right-padded: each
    [rows, longest]."""

    width = max(len(s.ids) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    labels = torch.zeros((len(sequences), width), dtype=torch.float32)
    for row, sequence in enumerate(sequences):
        n = len(sequence.ids)
        ids[row, :n] = torch.tensor(sequence.ids)
        attention[row, :n] = 1
        labels[row, :n] = torch.tensor(sequence.labels, dtype=torch.float32)
    return ids.to(device), attention.to(device), labels.to(device)


class LabelledLoss(torch.nn.Module):
    """The model with `labelled_loss_sum` as its forward: what DDP wraps, so that gradient
    synchronisation hooks run (they only fire through a wrapped module's forward)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, attention, labels):
        return labelled_loss_sum(self.model, ids, attention, labels)[0]


LOGITS_CHUNK = 4096  # positions whose float32 logits exist at once (2.3 GiB at 152k words)


def target_logprobs(head, hidden, targets, chunk: int = LOGITS_CHUNK):
    """log softmax(head(hidden[i]))[targets[i]] for each row i: [n, h], [n] -> [n], float32.

    Past `chunk` rows the output layer runs a chunk at a time, each recomputed in the
    backward pass (by_chunks): float32 logits and their log-softmax for every position of a
    long pass would otherwise be kept for the backward (at a 32k-token pass and a 152k
    vocabulary, about 37 GiB). Up to `chunk` rows it is one plain projection."""
    import torch.nn.functional as F

    def part(rows, wanted):
        return -F.cross_entropy(head(rows).float(), wanted, reduction="none")

    return by_chunks(part, chunk, hidden, targets)


def by_chunks(part, chunk: int, *rows):
    """part(*rows) computed `chunk` rows at a time, each chunk recomputed in the backward
    pass, so that no chunk's [chunk, vocab] tensors are kept for it; up to `chunk` rows, one
    plain call."""
    if rows[0].shape[0] <= chunk:
        return part(*rows)
    from torch.utils.checkpoint import checkpoint

    pieces = zip(*(r.split(chunk) for r in rows), strict=True)
    if not torch.is_grad_enabled():
        return torch.cat([part(*piece) for piece in pieces])
    return torch.cat([checkpoint(part, *piece, use_reentrant=False) for piece in pieces])


def labelled_loss_sum(model, ids, attention, labels):
    """Sum of the next-token cross-entropy over labelled tokens, each times its label's
    weight, and the sum of those weights (the token count when every weight is 1).

    Position t predicts token t+1, so the hidden state at t is scored against ids[t+1]
    wherever labels[t+1] > 0. labels may be a boolean mask (every weight 1).
    """
    import torch.nn.functional as F

    picked, wanted, chosen, head = labelled_rows(model, ids, attention, labels)
    if picked.shape[0] > LOGITS_CHUNK:
        losses = -target_logprobs(head, picked, wanted, LOGITS_CHUNK)
    else:  # the [n, vocab] logits exist only inside this call
        losses = F.cross_entropy(head(picked).float(), wanted, reduction="none")
    return (losses * chosen).sum(), float(chosen.sum().item())


def labelled_rows(model, ids, attention, labels):
    """What the loss on labelled tokens needs of a batch: the hidden states that predict a
    labelled token [n, hidden], those tokens [n], their label weights [n], and the output
    layer (left to the caller: only these n rows go through it)."""
    base = model.get_base_model() if is_peft(model) else model
    hidden = base.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state
    weights = labels[:, 1:].float()  # [rows, width-1]
    targets = weights > 0
    picked = hidden[:, :-1][targets]  # [n, hidden]
    wanted = ids[:, 1:][targets]  # [n]
    return picked, wanted, weights[targets], base.get_output_embeddings()
