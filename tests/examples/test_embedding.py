"""obsspec.api and examples/embedding/custom_rollout.py: speculation driven from a rollout
function of another framework's shape, on the caller's engines and the caller's sandbox."""

import importlib.util
import inspect
from pathlib import Path

import pytest

from obsspec import api
from obsspec.agent.protocol import Action, ActionFormat, format_action
from obsspec.inference.scripted import PacedEngine, ScriptedEngine
from obsspec.speculation.gate import GateSettings

ROOT = Path(__file__).parents[2]
GREETING = ROOT / "tests" / "fixtures" / "tasks" / "harbor-greeting"
SOLUTION = [
    "cat /srv/user.txt",
    'echo "Hello, $(cat /srv/user.txt)!" > /root/greeting.txt',
    "cat /root/greeting.txt",
]


def load_example():
    path = ROOT / "examples" / "embedding" / "custom_rollout.py"
    spec = importlib.util.spec_from_file_location("custom_rollout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_exports_what_it_documents():
    assert sorted(api.__all__) == sorted(set(api.__all__))
    for name in api.__all__:
        value = getattr(api, name)  # every exported name exists
        if inspect.isfunction(value) or inspect.isclass(value):
            assert inspect.getdoc(value), f"api.{name} has no docstring"
    assert isinstance(load_example().ContainerSandbox("c"), api.Sandbox)  # the protocol holds


def solving_policy(tokenizer) -> ScriptedEngine:
    """A caller's policy that solves the greeting task, then says done."""

    def reply(context: str) -> str:
        k = context.count("<|im_start|>assistant") - 1  # replies already in the context
        action = Action("command", SOLUTION[k]) if k < len(SOLUTION) else Action("done")
        return format_action(action, ActionFormat.markdown)

    return ScriptedEngine(tokenizer, reply)


@pytest.mark.docker
@pytest.mark.vllm
async def test_the_custom_rollout_speculates_losslessly_on_the_callers_engines(
    tiny_engine, tiny_model_dir, base_image
):
    example = load_example()
    tokenizer = api.load_tokenizer(tiny_model_dir)
    limits = api.EpisodeLimits(max_turns=6, max_tokens=32, temperature=0)
    policy = PacedEngine(tiny_engine, solving_policy(tokenizer), min_tokens=16)
    batch = [{"task_dir": GREETING, "seed": seed} for seed in (0, 1)]  # a group of two
    # Commands of milliseconds on a shared CPU: the auto gate, assuming a world model whose
    # cost it has not measured slows the others (prior_slowdown), would rightly not ask it.
    settings = api.SpeculationSettings(gate=GateSettings(prior_slowdown=0.0))
    wm = tiny_engine
    speculator = api.Speculator(tokenizer, world_model=wm, limits=limits, settings=settings)
    out = await example.rollout(batch, policy, speculator)

    assert out["rewards"] == [1.0, 1.0]
    for prompt, response, mask, logprobs in zip(
        out["prompt_ids"], out["response_ids"], out["loss_mask"], out["logprobs"], strict=True
    ):
        assert len(response) == len(mask) == len(logprobs) and prompt and sum(mask) > 0
    summary = out["speculation"]
    assert summary["attempted"] > 0 and summary["lossless_violations"] == 0
    commands = [command for command, _ in out["records"][1]]
    assert commands == SOLUTION
    # The next batch (a later step) on the same Speculator: its commands come back from the
    # state cache (siblings played in lockstep, as these identical ones are, may each run a
    # command before the other has an output to share).
    later = await example.rollout(
        [{"task_dir": GREETING, "seed": seed} for seed in (2, 3)], policy, speculator
    )
    assert later["rewards"] == [1.0, 1.0] and later["speculation"]["lossless_violations"] == 0
    assert later["speculation"]["matched"] > 0
    sources = {record.source for records in later["records"] for _, record in records}
    assert "state" in sources

    # lossless: the sequential rollout of the same batch is the same, token for token
    sequential = api.Speculator(tokenizer, world_model=None, limits=limits)
    task = api.load_task(GREETING)
    image = await api.task_image(task)
    again = await sequential.play(
        task, example.ContainerSandboxes(image), policy, seed=1, speculate=False
    )
    assert again.context_ids[len(again.prompt_ids) :] == out["response_ids"][1]
    assert api.speculation_records(again) == []


@pytest.mark.docker
@pytest.mark.vllm
async def test_the_custom_rollout_runs_a_policy_behind_an_openai_compatible_server(
    vllm_server, tiny_engine, tiny_model_dir, base_image
):
    example = load_example()
    tokenizer = api.load_tokenizer(tiny_model_dir)
    limits = api.EpisodeLimits(max_turns=2, max_tokens=16, temperature=0)
    speculator = api.Speculator(tokenizer, world_model=tiny_engine, limits=limits)
    async with api.OpenAIEngine(vllm_server, "tiny") as policy:
        out = await example.rollout([{"task_dir": GREETING, "seed": 3}], policy, speculator)
    assert out["rewards"] == [0.0]  # a random tiny model does not greet anyone
    assert len(out["response_ids"][0]) == len(out["loss_mask"][0]) > 0
    assert out["speculation"]["lossless_violations"] == 0
