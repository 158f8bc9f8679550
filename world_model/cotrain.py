"""Co-training: the world model fine-tuned on each RL step's real observations, as it goes.

    trainer = CoTrainer(base_dir, settings, action_format, seed)   # settings.max_len resolved
    stats = trainer.update(trajectory_rows)   # wm_loss, examples (used, too long), tokens, s
    trainer.save_weights(sync_dir)             # the world-model engine reloads it

As the policy learns, the commands it runs and so the observations it must be told change;
a world model trained once drifts away from them. Each step the model takes `updates`
optimizer steps on that step's command turns (built exactly as `train-wm` builds them) plus
`replay_sample` examples drawn from a bounded buffer of earlier steps', so it neither forgets
at once nor spends its time on stale data. The buffer keeps examples by episode and a draw
takes whole episodes: an episode's turns chain into one sequence (obsspec.train.sequences), so
64 replayed turns cost about 8 episodes' tokens, not 64 whole prompts (5.6x more on
workflow-ci episodes). The loss reported is the token mean of the first
update's forward passes: the loss on this step's data before learning it, the drift signal.
An example longer than `max_len` tokens is not trained on and not kept for replay; it is
counted (`wm_dropped_too_long`), never silently lost.
The buffer, its random state and the optimizer go into checkpoints, so a resumed run draws
the same replay as an uninterrupted one.
"""

from __future__ import annotations

import random
import time
from collections import deque
from pathlib import Path

from obsspec.agent.protocol import ActionFormat
from obsspec.models.tokenizer import load_tokenizer
from obsspec.train.activations import checkpoint_activations
from obsspec.train.batches import plan_batches
from obsspec.train.config import TrainSettings
from obsspec.train.core import TrainerCore
from obsspec.train.model import batch_tensors, labelled_loss_sum, load_model
from obsspec.train.precision import autocast, placement
from obsspec.train.sequences import Sample, pack
from obsspec.world_model.config import CotrainSettings
from obsspec.world_model.data import world_model_prompt
from obsspec.world_model.examples import ExampleReport, build_examples


class ReplayBuffer:
    """The last `size` examples seen, grouped by episode; draws are reproducible from the
    buffer's own RNG. A draw takes episodes in a random order, each from its first turn, so
    the turns it returns chain; when the buffer is full the oldest episode loses its first
    turns (each later turn still carries its whole prompt)."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.episodes: deque[list[Sample]] = deque()
        self.rng = random.Random(seed)

    @property
    def samples(self) -> list[Sample]:
        return [sample for episode in self.episodes for sample in episode]

    def __len__(self) -> int:
        return sum(len(episode) for episode in self.episodes)

    def draw(self, k: int) -> list[Sample]:
        order = list(range(len(self.episodes)))
        self.rng.shuffle(order)
        drawn: list[Sample] = []
        for index in order:
            if len(drawn) >= k:
                break
            drawn += self.episodes[index][: k - len(drawn)]
        return drawn

    def add(self, episodes: list[list[Sample]]) -> None:
        self.episodes.extend(episode for episode in episodes if episode)
        excess = len(self) - self.size
        while excess > 0:
            oldest = self.episodes[0]
            if len(oldest) <= excess:
                self.episodes.popleft()
            else:
                self.episodes[0] = oldest[excess:]
            excess -= min(len(oldest), excess)

    def state(self) -> dict:
        return {"episodes": [list(e) for e in self.episodes], "rng": self.rng.getstate()}

    def load(self, state: dict) -> None:
        self.episodes.clear()
        self.episodes.extend(state["episodes"])
        self.rng.setstate(state["rng"])


class CoTrainer:
    def __init__(
        self,
        base: Path,
        settings: CotrainSettings,
        action_format: ActionFormat,
        seed: int,
        *,
        device: str = "auto",
    ) -> None:
        import torch

        if settings.max_len is None:  # RLConfig.cotrain_settings resolves it
            raise ValueError("cotrain.max_len must be resolved before co-training")
        torch.manual_seed(seed)
        self.settings = settings
        self.max_len = settings.max_len
        tokenizer = load_tokenizer(base)
        self.prompt = world_model_prompt(tokenizer, action_format)
        self.pad_id = tokenizer.pad_token_id or 0
        self.where = placement(TrainSettings(device=device))
        self.model = load_model(base, self.where, None)
        if settings.activation_checkpointing:
            checkpoint_activations(self.model)
        self.model.train()
        self.core = TrainerCore(  # constant lr
            self.model,
            lr=settings.lr,
            weight_decay=0.01,  # torch's AdamW default, what co-training has always used
            max_grad_norm=settings.max_grad_norm,
            gradient_name="the world model's gradient",
            lr_option="cotrain.lr",
            tokenizer_from=base,  # the synced and checkpointed model/ is servable
        )
        self.replay = ReplayBuffer(settings.replay_size, seed)

    def update(self, rows: list[dict]) -> dict[str, float]:
        """`updates` optimizer steps on the rows' command turns and a replayed sample.
        wm_examples: fresh and replayed; wm_examples_used: those trained on;
        wm_dropped_too_long: those longer than max_len (fresh ones: they are not replayed);
        wm_skipped_turns: command turns that are no example (timed out, cut off at the
        observation cap, or lost to the infrastructure: no whole observation to learn)."""
        start = time.monotonic()
        episodes, report = episode_samples(rows, self.prompt)
        fresh = [sample for episode in episodes for sample in episode]
        kept = [[s for s in episode if self.fits(s)] for episode in episodes]
        fitting = [sample for episode in kept for sample in episode]
        samples = fitting + self.replay.draw(self.settings.replay_sample)
        self.replay.add(kept)
        packing = pack(samples, self.max_len)  # too_long: replay kept by an older version
        sequences = packing.sequences
        counts = {
            "wm_examples": len(fresh) + len(samples) - len(fitting),
            "wm_examples_used": sum(s.samples for s in sequences),
            "wm_dropped_too_long": len(fresh) - len(fitting) + packing.too_long,
            "wm_skipped_turns": sum(report.skipped.values()),
        }
        if not sequences:
            idle = {"wm_tokens": 0, "wm_forward_tokens": 0, "wm_seconds": 0.0}
            return {"wm_loss": float("nan"), **counts, **idle}
        first_loss = None
        for _ in range(self.settings.updates):
            loss = self.optimizer_step(sequences)
            first_loss = loss if first_loss is None else first_loss
        return {
            "wm_loss": first_loss,
            **counts,
            "wm_tokens": sum(s.target_tokens for s in sequences),
            "wm_forward_tokens": sum(len(s.ids) for s in sequences) * self.settings.updates,
            "wm_seconds": time.monotonic() - start,
        }

    def fits(self, sample: Sample) -> bool:
        return len(sample.prompt_ids) + len(sample.target_ids) <= self.max_len

    def optimizer_step(self, sequences) -> float:
        """One step over every sequence (token mean over all their labelled tokens)."""
        labelled = sum(s.target_weight for s in sequences)
        lengths = [len(s.ids) for s in sequences]
        total = 0.0

        def loss_of(batch):
            nonlocal total
            tensors = batch_tensors([sequences[i] for i in batch], self.pad_id, self.where.device)
            with autocast(self.where):
                loss, _ = labelled_loss_sum(self.model, *tensors)
            total += loss.item()
            return loss / labelled

        batches = plan_batches(lengths, self.settings.batch_tokens, seed=0, epoch=0)
        self.core.step(batches, loss_of)
        return total / (labelled or 1)

    def save_weights(self, out: Path) -> Path:
        return self.core.save_weights(out)

    def save(self, folder: Path) -> None:
        self.core.save(folder, {"replay": self.replay.state()})

    def restore(self, folder: Path) -> None:
        state = self.core.load(folder)
        self.replay.load(state["replay"])


def episode_samples(rows: list[dict], prompt) -> tuple[list[list[Sample]], ExampleReport]:
    """Each row's command turns as training samples, one list per episode, in turn order."""
    report = ExampleReport()
    episodes = []
    for row in rows:
        examples, _, one = build_examples([row], prompt, held_out_fraction=0.0)
        report.merge(one)
        episodes.append([Sample(e.prompt_ids, e.target_ids) for e in examples])
    return episodes, report
