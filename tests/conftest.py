"""Shared fixtures: one tiny model, one vLLM engine and one Docker client per test process (the
session's, or each pytest-xdist worker's). The containers its tests make carry that process's
run id, so that parallel workers look at and remove their own only.

Capabilities (a Docker daemon, the base image, the default model) are detected; without them
the tests that need them skip, unless pytest runs with --require-capabilities (as `make test`
does), in which case a missing capability is a failure: CI must not pass by skipping.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from obsspec.config import DEFAULT_MODEL, GlobalConfig


def pytest_addoption(parser):
    parser.addoption(
        "--require-capabilities",
        action="store_true",
        help="fail (instead of skip) when Docker, the base image or the model is missing",
    )


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`: --dist loadscope --no-loadscope-reorder), the costly
    modules first. Each process takes the next module when it is free (a module's tests stay in
    one process, so its module fixtures are made once), so a long module started last would
    leave the other process idle at the end. Every process sorts alike, as xdist requires; the
    order within a module is kept. A plain run keeps the files' order."""
    if not hasattr(config, "workerinput"):  # not an xdist worker
        return
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        rank[module] = min(rank.get(module, COST_RANKS), cost_rank(item))
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


# The modules that use the session's vLLM engine (`tiny_engine`) or its `vllm serve`
# (`vllm_server`) run as one unit of work in one xdist process: each then starts once per
# suite, instead of once in every process that happens to get one of them (about 30 s of CPU
# each). The controller sees no fixtures, so the modules are found by the names they use.
SHARED_ENGINES = re.compile(r"\b(tiny_engine|vllm_server)\b")


def shared_engine_modules(root: Path) -> frozenset[str]:
    return frozenset(
        path.relative_to(root).as_posix()
        for path in (root / "tests").rglob("test_*.py")
        if SHARED_ENGINES.search(path.read_text())
    )


def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope, with the shared-engine modules as one scope (see above)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = shared_engine_modules(config.rootpath)

    class SharedEngineScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.split("::")[0] in shared:
                return "shared-engines"
            return super()._split_scope(nodeid)

    return SharedEngineScopes(config, log)


# By their markers, the tests that take longest first: slow ones and Ray's (whole rl runs), then
# vLLM engines, then Docker, then the rest.
COST_RANKS = 3


def cost_rank(item) -> int:
    marked = {mark.name for mark in item.iter_markers()}
    if marked & {"slow", "ray"}:
        return 0
    if "vllm" in marked:
        return 1
    return 2 if "docker" in marked else COST_RANKS


def missing(request, reason: str):
    if request.config.getoption("--require-capabilities"):
        pytest.fail(f"required capability missing: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def settings() -> GlobalConfig:
    return GlobalConfig()


@pytest.fixture(scope="session")
def default_model_dir(request, settings) -> Path:
    from obsspec.errors import ModelError
    from obsspec.models.registry import resolve_model

    try:
        return resolve_model(DEFAULT_MODEL, settings.paths.models_dir)
    except ModelError as e:
        missing(request, f"{e} (run `obsspec models pull`)")


@pytest.fixture(scope="session")
def tokenizer(default_model_dir):
    """The default model's tokenizer (the real one every test model shares)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir)


@pytest.fixture(scope="session")
def builder(tokenizer):
    """Exact-token contexts for the default tokenizer, observations in the user role."""
    from obsspec.agent.context import ChatContextBuilder

    return ChatContextBuilder(tokenizer)


@pytest.fixture(scope="session")
def tiny_model_dir(default_model_dir, tmp_path_factory) -> Path:
    from obsspec.models.tiny import make_tiny_model

    return make_tiny_model(default_model_dir, tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def deep_tiny_model_dir(default_model_dir, tmp_path_factory) -> Path:
    """A tiny model with 4 layers: enough to take some of them (`train-wm --layers`)."""
    from obsspec.models.tiny import TinyShape, make_tiny_model

    out = tmp_path_factory.mktemp("models") / "tiny-4-layers"
    return make_tiny_model(default_model_dir, out, TinyShape(layers=4))


@pytest.fixture(scope="session")
async def tiny_engine(tiny_model_dir):
    from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine

    settings = EngineSettings(model=tiny_model_dir, max_model_len=1024, kv_cache_gb=0.25)
    async with LocalVLLMEngine(settings) as engine:
        yield engine


@pytest.fixture(scope="session")
def docker_client(request):
    from obsspec.environments.docker_api import connect
    from obsspec.environments.errors import DockerUnavailable

    try:
        client = connect(timeout_s=60)
    except DockerUnavailable as e:
        missing(request, str(e))
    yield client
    client.close()


@pytest.fixture(scope="session")
def run_id(docker_client):
    """Labels every container this session makes; whatever is left at the end is removed."""
    from obsspec.environments.gc import gc_containers, remove_run_containers

    gc_containers(docker_client)  # leftovers of earlier sessions that were killed
    run = f"pytest-{uuid.uuid4().hex[:8]}"
    yield run
    leftovers = remove_run_containers(docker_client, run)
    assert leftovers == 0, f"{leftovers} container(s) of this test session were left behind"


@pytest.fixture(scope="session")
def base_image(request, docker_client, settings) -> str:
    from obsspec.environments.image import base_image_status

    current, detail = base_image_status(docker_client, settings.base_image)
    if not current:
        missing(request, f"{detail} (run `obsspec env build`)")
    build_with_network(docker_client, TASK_WITH_PACKAGES)
    return settings.base_image


# Its Dockerfile's first two lines (FROM the base image, apt-get install python3-pytest) begin
# every fixture task that installs pytest: tests/fixtures/real_tasks and the tasks that
# test_validate, test_verifier_hostile and test_task_formats write or copy.
TASK_WITH_PACKAGES = Path(__file__).parent / "fixtures" / "tasks" / "tbv1-wordcount"


def build_with_network(docker_client, task_dir: Path) -> None:
    """Build task_dir's image with a network, once per session, as docs/tasks.md tells users
    to: builds follow --network, so under the default `none` its apt-get fails; afterwards the
    image is kept by its content hash and its layers are Docker's build cache, which the same
    lines in other tasks' Dockerfiles reuse under `none`. Without this, a test that builds
    such a task passes only if an earlier test happened to build it with a network."""
    import asyncio

    from obsspec.environments.sandbox import NetworkPolicy
    from obsspec.environments.tasks.images import TaskImages
    from obsspec.environments.tasks.load import load_task

    images = TaskImages(docker_client, network=NetworkPolicy.verify)
    asyncio.run(images.ensure(load_task(task_dir)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """A real `vllm serve` (OpenAI-compatible) with the tiny model, served as 'tiny', with
    priority scheduling and vLLM's development endpoints (weight reload, /server_info)."""
    log = tmp_path_factory.mktemp("serve") / "vllm.log"
    with serve_tiny(tiny_model_dir, log, "--scheduling-policy", "priority") as url:
        yield url


@contextlib.contextmanager
def serve_tiny(model_dir: Path, log: Path, *args: str):
    """`vllm serve` of model_dir as 'tiny' on a free loopback port until the block ends, in
    the dtype obsspec's own engines choose here (float32 on a CPU without bfloat16
    instructions: obsspec.inference.cpu_dtype), so the two give the same log-probabilities."""
    import httpx

    from obsspec.inference.cpu_dtype import engine_dtype

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "1024",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(256 << 20),
        "--disable-uvicorn-access-log",
        "--dtype",
        engine_dtype("auto"),
        *args,
    ]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("vllm serve did not become healthy in 120 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
