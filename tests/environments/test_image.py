import shutil

import pytest

from obsspec.environments.image import BASE_REPO, ensure_base_image, recipe_dir, recipe_hash
from obsspec.environments.oneshot import LABEL, run_once
from obsspec.environments.sandbox import LABEL_RUN

pytestmark = pytest.mark.docker


def test_recipe_hash_follows_recipe_content(tmp_path):
    copy = tmp_path / "base"
    shutil.copytree(recipe_dir(), copy)
    assert recipe_hash(copy) == recipe_hash()
    with (copy / "setup.sh").open("a") as f:
        f.write("\n# changed\n")
    assert recipe_hash(copy) != recipe_hash()


def test_base_image_is_tagged_and_not_rebuilt(docker_client, base_image):
    result = ensure_base_image(docker_client)
    assert result.source == "cached" and not result.built
    assert f"{BASE_REPO}:{recipe_hash()}" in result.tags
    image = docker_client.images.get(base_image)
    assert image.id == docker_client.images.get(f"{BASE_REPO}:{recipe_hash()}").id
    assert image.labels["obsspec.recipe"] == recipe_hash()


def test_base_image_has_the_toolset(docker_client, base_image):
    tools = [
        "bash",
        "find",
        "grep",
        "sed",
        "gawk",
        "ps",
        "python3",
        "git",
        "make",
        "gcc",
        "tar",
        "gzip",
        "diff",
        "ls",
    ]
    result = run_once(docker_client, base_image, f"command -v {' '.join(tools)}")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.split()) == len(tools)
    compiled = run_once(
        docker_client, base_image, "printf 'int main(){return 3;}' > t.c && gcc t.c -o t && ./t"
    )
    assert compiled.exit_code == 3


def test_sandbox_environment_is_deterministic(docker_client, base_image):
    script = 'echo "$(hostname) $TZ $LANG $HOME $(umask) $(date +%Z) $(pwd)"'
    first = run_once(docker_client, base_image, script)
    second = run_once(docker_client, base_image, script)
    assert first.stdout == second.stdout == "sandbox UTC C.UTF-8 /root 0022 UTC /root\n"


def test_oneshot_reports_exit_codes_stderr_and_has_no_network(docker_client, base_image):
    result = run_once(docker_client, base_image, "echo out; echo err >&2; exit 7")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 7)
    assert not result.timed_out
    net = run_once(docker_client, base_image, "ls /sys/class/net")
    assert net.stdout.split() == ["lo"]


def test_oneshot_timeout_kills_and_removes(docker_client, base_image, run_id):
    result = run_once(
        docker_client, base_image, "echo started; sleep 30", timeout_s=1.5, run_id=run_id
    )
    assert result.timed_out
    assert result.seconds < 20
    assert "started" in result.stdout
    # This session's one-shot containers only: other test processes may be running theirs.
    mine = {"label": [LABEL, f"{LABEL_RUN}={run_id}"]}
    assert docker_client.containers.list(all=True, filters=mine) == []
