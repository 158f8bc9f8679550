"""Rows of the fault table (tests/faults.py) about the trainers: a world model made shallower
or distilled (`train-wm --layers`, `--teacher`) and co-training behind the rollout (`rl`)."""

from __future__ import annotations

from tests.fault_row import Fault

DEPTH = "tests/models/test_depth.py::"
DISTILL = "tests/world_model/test_distill_training.py::"
OVERLAP = "tests/rl/test_cotrain_overlap.py::"

TRAINING_FAULTS = [
    Fault(
        "`train-wm --layers K` asks for more layers than the base has, or the base's layers "
        "cannot be taken (weights not named `<prefix>.layers.<i>.*`, layers named by index in "
        "its config: mixture-of-experts lists, sliding windows on some layers)",
        "1 (`train-wm`)",
        "`error: --layers 40: the model has 30 layers; choose 2 to 30`, or the base's file and "
        "the reason; K < 2 is refused by the flag",
        "nothing: OUT is not made, no half-made copy is left in the model cache",
        "refused again",
        (
            DEPTH + "test_a_layer_count_out_of_range_names_the_flag_and_the_range",
            DEPTH + "test_a_model_whose_layers_cannot_be_taken_is_refused",
        ),
    ),
    Fault(
        "`train-wm --teacher DIR` names a model of another vocabulary (another width, or the "
        "same tokens under other ids)",
        "1 (`train-wm`)",
        "`error: --teacher DIR: its vocabulary is not that of the model trained, BASE "
        "(vocab_size ..., the student's ...)`, before any work",
        "nothing: OUT is not made",
        "refused again",
        (
            DISTILL + "test_a_teacher_with_a_wider_output_layer_is_refused",
            DISTILL + "test_a_teacher_whose_tokenizer_numbers_tokens_otherwise_is_refused",
        ),
    ),
    Fault(
        "the world model's co-training update fails while it runs behind the next rollout "
        "(`[rl.cotrain] overlap`)",
        "1 (`rl`)",
        "`error: step N: the world-model trainer (its update on step N-1's rows) failed: ...`, "
        "where the driver awaits it, after the rollout; the hint says `--resume`",
        "the manifest `failed`; the steps before are kept to the last checkpoint",
        "`--resume` goes on from the last checkpoint, which holds the last update awaited",
        (
            OVERLAP
            + "test_a_failed_update_raises_where_it_is_awaited_and_an_abandoned_one_is_retrieved",
        ),
    ),
]
