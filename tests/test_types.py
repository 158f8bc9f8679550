from obsspec.types import NO_OUTPUT, TRUNCATION_MARKER, ExecResult, render_observation


def result(stdout="", stderr="", exit_code=0, **kw) -> ExecResult:
    return ExecResult(stdout=stdout, stderr=stderr, exit_code=exit_code, duration_s=0.1, **kw)


def test_stdout_then_stderr_then_exit_line():
    text = render_observation(result("out\n\n", "err\n", 2))
    assert text == "out\nerr\n[exit code: 2]"


def test_empty_output_and_timeout_lines():
    assert render_observation(result()) == f"{NO_OUTPUT}\n[exit code: 0]"
    timed = result("partial\n", exit_code=None, timed_out=True, timeout_s=2.0)
    assert render_observation(timed) == "partial\n[command timed out after 2 s and was killed]"


def test_ansi_crlf_and_binary_are_cleaned():
    text = render_observation(result("\x1b[31mred\x1b[0m\r\nline\x00\x07end\n"))
    assert text == "red\nline\ufffd\ufffdend\n[exit code: 0]"


def test_truncation_keeps_head_and_tail_deterministically():
    long = "".join(f"line {i}\n" for i in range(5000))
    first = render_observation(result(long), max_chars=1000)
    assert first == render_observation(result(long), max_chars=1000)
    assert first.startswith("line 0\n") and "line 4999" in first
    assert TRUNCATION_MARKER in first
    assert len(first) < 1000 + len(TRUNCATION_MARKER) + 30


def test_equal_results_render_equal_and_different_differ():
    assert render_observation(result("a")) == render_observation(result("a\n"))
    assert render_observation(result("a", exit_code=1)) != render_observation(result("a"))
