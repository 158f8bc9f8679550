"""`obsspec train-wm`: collect runs -> examples -> packed sequences -> trainer -> evaluation.

    record = train_world_model(config, models_dir, on_step, note)
    report = evaluate_world_model(config, models_dir, on_prediction, note)

Training writes OUT (an HF model directory vLLM serves as is) and OUT/obsspec-train.json,
which records the trained tasks' content hashes so that a later `--eval-only` never scores
the model on a task it has seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from obsspec.errors import ConfigError
from obsspec.models.depth import shallow_model
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.tracking import config_logger, require_wandb
from obsspec.train import distributed
from obsspec.train.checkpoint import read_record, write_record
from obsspec.train.config import TrainSettings
from obsspec.train.distill import Distillation, check_teacher
from obsspec.train.fresh import call_in_fresh_process
from obsspec.train.loop import StepProgress, train_into
from obsspec.train.sequences import Packing, Sample, pack
from obsspec.world_model.config import EvalSettings, EvalWMConfig, TrainWMConfig
from obsspec.world_model.data import WorldModelData, load_data, load_eval_data
from obsspec.world_model.examples import Example
from obsspec.world_model.prompt import WorldModelPrompt

Note = Callable[[str], None]


def samples_of(examples: list[Example]) -> list[Sample]:
    """In dataset order, so the turns of an episode chain into one sequence."""
    return [Sample(e.prompt_ids, e.target_ids) for e in examples]


def packings(data: WorldModelData, settings: TrainSettings) -> tuple[Packing, Packing]:
    """The training sequences, weighted as settings say, and the held-out ones, whose loss
    is always a mean over tokens (comparable between weightings)."""
    train = pack(samples_of(data.train), settings.max_len, settings.loss_weighting)
    return train, pack(samples_of(data.held_out), settings.max_len)


def check_split(data: WorldModelData, config: TrainWMConfig) -> None:
    if data.held_out or not config.evaluate:
        return
    tasks = len(data.report.train_tasks)
    raise ConfigError(
        f"no held-out tasks: all {tasks} task(s) of --data fell on the training side "
        f"(--held-out {config.held_out}); add tasks, raise --held-out, pass --eval-data, "
        "or --no-eval to train without evaluation"
    )


def starting_model(config: TrainWMConfig, base: Path, models_dir: Path, note: Note):
    """The model training starts from: the base, or its --layers K copy (made once, kept
    beside the models), and that copy's description (None for the base)."""
    if config.layers is None:
        return base, None
    shallow = shallow_model(base, config.layers, models_dir, config.layer_choice)
    note(f"starting from {len(shallow.kept)} of the base's {shallow.of} layers: {shallow.kept}")
    return shallow.path, shallow


def distillation(config: TrainWMConfig, base: Path, models_dir: Path, note: Note):
    """--teacher resolved, checked against the base's vocabulary, with its `distill`
    settings; None without a teacher."""
    if config.teacher is None:
        return None
    teacher = resolve_model(config.teacher, models_dir)
    check_teacher(base, teacher)
    settings = config.distill
    note(f"distilling from {teacher} (alpha {settings.alpha}, temperature {settings.temperature})")
    return Distillation(teacher, settings.alpha, settings.temperature)


def train_world_model(
    config: TrainWMConfig,
    models_dir: Path,
    on_step: Callable[[StepProgress], None],
    note: Note,
    on_prediction: Callable[[int, int], None] = lambda done, total: None,
) -> dict:

    require_wandb(config.wandb)  # before any work
    base = resolve_model(config.base, models_dir)
    distill = distillation(config, base, models_dir, note)  # refused before any work
    families = set(config.held_out_families) if config.held_out_families else None
    data = load_data(
        config.data,
        load_tokenizer(base),
        eval_dirs=config.eval_data,
        held_out_fraction=config.held_out,
        held_out_families=families,
    )
    check_split(data, config)
    if not data.train:
        raise ConfigError("--data: every task fell on the held-out side; nothing to train on")
    packed, held_out = packings(data, config.train)
    start, shallow = starting_model(config, base, models_dir, note)
    note(
        f"{data.report.examples} turns from {data.report.episodes} episodes: "
        f"{len(data.train)} to train on ({len(packed.sequences)} sequences, "
        f"{sum(len(s.ids) for s in packed.sequences)} tokens), {len(data.held_out)} held out"
        + (f"; {packed.too_long} longer than --max-len skipped" if packed.too_long else "")
    )
    outcome = train_into(
        config.out,
        overwrite=config.overwrite,
        resume=config.resume,
        command="train-wm",
        inputs={
            "--data": config.data,
            "--eval-data": config.eval_data,
            "--base": base,
            "--layers": shallow and shallow.path,
            "--teacher": distill and distill.teacher,
        },
        base=start,
        sequences=packed.sequences,
        settings=config.train,
        held_out=held_out.sequences,
        progress=on_step,
        open_logger=config_logger(config, "train_wm"),
        distill=distill,
    )
    record = {
        "kind": "world_model",
        "base": str(base),
        "layers": shallow and shallow.as_dict(),
        "teacher": distill and str(distill.teacher),
        "distill": distill and config.distill.model_dump(mode="json"),
        "config": config.model_dump(mode="json"),
        "data": data.report.as_dict() | {"too_long": packed.too_long},
        "trained_task_hashes": sorted({e.context.task_hash for e in data.train}),
        "training": vars(outcome),
    }
    if not distributed.current().main:
        return record  # rank 0 records and evaluates
    write_record(config.out, record)
    if config.evaluate:
        # The model's record now excludes its training tasks: what is left of the data is
        # exactly the held-out side of the split.
        evaluation = EvalWMConfig(
            model=str(config.out), data=config.eval_data or config.data, eval=config.eval
        )
        record["evaluation"] = evaluate_in_fresh_process(
            evaluation, models_dir, on_prediction, note
        )
        write_record(config.out, record)
    return record


def evaluate_in_fresh_process(
    config: EvalWMConfig,
    models_dir: Path,
    on_prediction: Callable[[int, int], None],
    note: Note,
) -> dict:
    """evaluate_world_model in a spawned process (obsspec.train.fresh says why)."""
    handlers = {"progress": on_prediction, "note": note}
    return call_in_fresh_process(evaluation_child, (config, models_dir), handlers)


def evaluation_child(config: EvalWMConfig, models_dir: Path, emit) -> dict:
    return evaluate_world_model(
        config,
        models_dir,
        lambda done, total: emit("progress", done, total),
        lambda message: emit("note", message),
    )


def evaluate_world_model(
    config: EvalWMConfig,
    models_dir: Path,
    on_prediction: Callable[[int, int], None],
    note: Note,
) -> dict:

    model = resolve_model(config.model, models_dir)
    record = read_record(model) or {}
    trained = set(record.get("trained_task_hashes", []))
    prompt, examples, report, excluded = load_eval_data(
        config.data, load_tokenizer(model), trained_hashes=trained
    )
    note(
        f"evaluating {len(examples)} turns of {len(report.held_out_tasks)} unseen task(s)"
        + (f" ({excluded} task(s) the model was trained on left out)" if excluded else "")
    )
    result = asyncio.run(run_evaluation(model, examples, prompt, config.eval, on_prediction))
    return {"model": str(model), "excluded_trained_tasks": excluded, **result}


async def run_evaluation(
    model: Path,
    examples: list[Example],
    prompt: WorldModelPrompt,
    settings: EvalSettings,
    on_prediction: Callable[[int, int], None],
) -> dict:
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
    from obsspec.world_model.evaluate import evaluate
    from obsspec.world_model.lm import LMPredictor

    engine_settings = EngineSettings(
        model=model,
        max_model_len=settings.max_model_len,
        kv_cache_gb=settings.kv_cache_gb,
        max_num_seqs=max(64, 2 * settings.concurrency),
    )
    # an answer cut off is no answer: unset, leave room for the longest observation
    max_tokens = settings.max_tokens or max((len(e.target_ids) for e in examples), default=1)
    async with LocalVLLMEngine(engine_settings) as engine:
        predictor = LMPredictor(engine, prompt, max_tokens=max_tokens)
        return await evaluate(examples, predictor, settings, on_prediction)
