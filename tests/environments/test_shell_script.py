"""bash's messages made deterministic, without a shell: job notices."""

from obsspec.environments.shell_script import strip_job_notices


def test_job_notices_are_stripped_whole():
    compound = "bash: line 1:    18 Killed                  while true; do\n    :;\ndone\n"
    trap_named = 'bash: line 1:    15 Killed                  builtin kill -RTMIN+7 "$$"\n'
    core = "bash: line 3:     7 Segmentation fault      (core dumped) ./a.out\n"
    kept = 'bash: line 1: 5: command not found\n  File "x.py", line 1\n'
    assert strip_job_notices(compound + trap_named + core + kept) == kept


def test_only_the_job_text_goes_with_a_notice():
    nested = (
        "bash: line 2:    40 Killed                  ( while :; do\n"
        "    if true; then\n        sleep 1;\n    fi;\ndone )\n"
    )
    after = "    indented output of the command\nlast line\n"
    assert strip_job_notices("first\n" + nested + after) == "first\n" + after
