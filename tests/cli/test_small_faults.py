"""Small faults a hostile user found (issue 38, item 12), each as a script or a person meets
it: the exit code, one error line naming what is wrong, one JSON object under --json, and
nothing made where the command was refused."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import OBSSPEC, obsspec
from tests.cli.test_exit_codes import GREETING, error_lines


# --- profile simulate: --json after a refused --calibrate ------------------------------------
def test_json_after_a_refused_option_of_a_subcommand_still_gives_one_object(tmp_path):
    # `profile` is a group with a --json of its own: left unset, it used to cancel the
    # command line's --json before simulate's --calibrate was refused
    not_a_dir = tmp_path / "report.json"
    not_a_dir.write_text("{}")
    result = obsspec("profile", "simulate", "--calibrate", str(not_a_dir), "--json")
    assert result.returncode == 2
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "usage_error" and "--calibrate" in outcome["error"]
    assert outcome["exit_code"] == 2


# --- env shell: Ctrl-C at the idle prompt ----------------------------------------------------
class Terminal:
    """A command on a pseudo-terminal, as a person at a keyboard runs it."""

    def __init__(self, *args: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover (the child)
            os.execv(OBSSPEC, [OBSSPEC, *args])
        self.seen = b""

    def read_until(self, text: str, timeout: float = 120) -> str:
        """Everything printed since the last call, once `text` was among it."""
        start = len(self.seen)
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen[start:] and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the command ended
                    break
                if not chunk:
                    break
                self.seen += chunk
        printed = self.seen[start:].decode(errors="replace")
        assert text in printed, printed
        return printed

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def exit_code(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                self.seen += os.read(self.fd, 4096)
            except OSError:
                time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        raise AssertionError(f"still running: {self.seen[-500:]!r}")


@pytest.mark.docker
def test_ctrl_c_at_the_shell_prompt_drops_the_line_and_says_how_to_leave(base_image):
    term = Terminal("env", "shell", "--image", base_image)
    term.read_until("sandbox$")
    term.type("echo half-typed\x03")  # Ctrl-C before Enter
    # (a loaded machine took more than 10 s to print the next prompt)
    assert "Ctrl-D leaves the shell" in term.read_until("sandbox$", timeout=60)
    term.type("for i in 1 2; do\n")  # a continuation, then Ctrl-C at its `>` prompt
    term.read_until("> ")
    term.type("\x03")
    term.read_until("sandbox$", timeout=10)
    term.type("echo still here\n")  # the shell goes on: nothing was cancelled
    printed = term.read_until("[exit code: 0]", timeout=60)
    assert "still here" in printed and "half-typed" not in printed.replace("echo", "")
    term.type("\x04")  # Ctrl-D leaves
    assert term.exit_code() == 0
    result = obsspec("env", "shell", "--help")
    assert "Ctrl-C" in result.stdout and "Ctrl-D" in result.stdout


# --- a config file that is not UTF-8 ---------------------------------------------------------
@pytest.mark.parametrize(
    "name, text", [("bad.toml", b"[paths]\ncache_dir = 'caf\xe9'\n"), ("bad.yaml", b"a: \xff\n")]
)
def test_a_config_file_not_in_utf8_is_named_with_the_offending_byte(tmp_path, name, text):
    bad = tmp_path / name
    bad.write_bytes(text)
    result = obsspec("models", "list", "--config", str(bad), "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    offset = text.index(b"\xe9" if name.endswith("toml") else b"\xff")
    line = text[:offset].count(b"\n") + 1
    assert error == (
        f"config file {bad} is not UTF-8 text: byte {offset} (line {line}) is {text[offset]:#04x}"
    )


# --- --timeout out of range ------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [["env", "run"], ["env", "shell", "--image", "obsspec/base"], ["env", "determinism", "x"]],
)
def test_a_timeout_too_large_to_wait_is_a_usage_error_naming_the_range(command):
    args = [*command, "--timeout", "1e308"]
    result = obsspec(*args, "--", "true") if command[1] == "run" else obsspec(*args)
    assert result.returncode == 2, result.stderr
    error = error_lines(result.stderr)[0]
    assert "'--timeout'" in error and "1e+308 is not in the range 0.1<=x<=604800" in error


# --- model directories that cannot serve as a policy or be trained -------------------------
def model_copy(default_model_dir: Path, target: Path, *, leave_out: str) -> Path:
    target.mkdir()
    for path in default_model_dir.iterdir():
        if path.name != leave_out:
            (target / path.name).symlink_to(path)
    return target


@pytest.fixture
def no_template_model(default_model_dir, tmp_path) -> Path:
    """The default model without its chat template (a base model's tokenizer)."""
    return model_copy(default_model_dir, tmp_path / "no-template", leave_out="chat_template.jinja")


@pytest.fixture
def garbage_weights_model(default_model_dir, tmp_path) -> Path:
    """The default model whose model.safetensors is random bytes (a disk error, a bad copy)."""
    model = model_copy(default_model_dir, tmp_path / "garbage", leave_out="model.safetensors")
    (model / "model.safetensors").write_bytes(os.urandom(1 << 16))
    return model


@pytest.fixture
def training_run(tmp_path, builder) -> Path:
    """A collect run that sft and train-wm take (two episodes of one task)."""
    from tests.world_model.runs import episode_row, steps_for, write_run

    rows = [episode_row(builder, "a-000", steps_for("a-000"), i) for i in range(2)]
    return write_run(tmp_path / "data", rows)


def test_a_model_without_a_chat_template_is_refused_naming_it(no_template_model, tmp_path):
    model, out = no_template_model, tmp_path / "run"
    result = obsspec("collect", "--tasks", str(GREETING), "--policy", str(model), "--out", str(out))
    assert result.returncode == 1
    error, hint = error_lines(result.stderr)
    assert error == f"error: model directory {model}: its tokenizer has no chat template"
    assert "chat_template.jinja" in hint
    assert not out.exists()  # refused before anything was made

    watch = obsspec("episode", str(GREETING), "--model", str(model), "--json")
    assert watch.returncode == 1
    assert json.loads(watch.stdout)["error"] == error.removeprefix("error: ")


@pytest.mark.parametrize("command", ["sft", "train-wm"])
def test_training_from_a_model_without_a_chat_template_is_refused(
    command, no_template_model, training_run, tmp_path
):
    out = tmp_path / "trained"
    args = ["--data", str(training_run), "--base", str(no_template_model), "--out", str(out)]
    result = obsspec(command, *args, "--no-eval", "--json")
    assert result.returncode == 1, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error == f"model directory {no_template_model}: its tokenizer has no chat template"
    assert not out.exists()


def test_garbage_weights_are_refused_naming_the_file_and_make_nothing(
    garbage_weights_model, training_run, tmp_path
):
    weights = garbage_weights_model / "model.safetensors"
    out = tmp_path / "trained"
    args = ["--data", str(training_run), "--base", str(garbage_weights_model), "--out", str(out)]
    result = obsspec("sft", *args, "--no-eval")
    assert result.returncode == 1
    error, hint = error_lines(result.stderr)
    assert error.startswith(f"error: model weights {weights} do not load (")
    assert "unexpected" not in error and str(garbage_weights_model) in hint
    assert not out.exists()  # refused before --out was made

    run = tmp_path / "run"
    collect = obsspec(
        "collect", "--tasks", str(GREETING), "--policy", str(garbage_weights_model),
        "--out", str(run), "--json",
    )  # fmt: skip
    assert collect.returncode == 1
    assert json.loads(collect.stdout)["error"] == error.removeprefix("error: ")
    assert not run.exists()

    watch = obsspec("episode", str(GREETING), "--model", str(garbage_weights_model), "--json")
    assert watch.returncode == 1
    assert json.loads(watch.stdout)["error"] == error.removeprefix("error: ")


def test_the_engine_names_garbage_weights_before_vllm_reads_them(garbage_weights_model):
    import asyncio

    from obsspec.errors import ModelError
    from obsspec.inference.vllm_local import LocalVLLMEngine
    from obsspec.inference.vllm_settings import EngineSettings

    engine = LocalVLLMEngine(EngineSettings(model=str(garbage_weights_model)))
    with pytest.raises(ModelError, match=r"model weights .*model\.safetensors do not load"):
        asyncio.run(engine.start())


# --- --image-map SRC=DST ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "command", [["env", "validate", str(GREETING)], ["collect", "--tasks", str(GREETING)]]
)
def test_a_malformed_image_map_is_a_usage_error_naming_the_flag(command, tmp_path):
    result = obsspec(*command, "--image-map", "python", "--json")
    assert result.returncode == 2, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "usage_error"
    assert "'--image-map'" in outcome["error"] and "'python' is not SRC=DST" in outcome["error"]


# --- export of a directory that holds no run -------------------------------------------------
def test_export_of_a_directory_without_a_run_says_so(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "sft.jsonl"
    result = obsspec("export", str(empty), "--format", "openai-jsonl", "--out", str(out))
    assert result.returncode == 1
    error, hint = error_lines(result.stderr)
    assert error == (
        f"error: RUN {empty}: holds no run (no manifest.json or rl-run.json, no data/*.parquet)"
    )
    assert "obsspec collect" in hint and "manifest" not in hint
    assert not out.exists()
