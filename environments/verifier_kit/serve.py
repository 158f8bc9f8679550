"""The kit in a sandbox, for the verifier alone: uploaded after the agent phase ended.

    prefix = await serve_kit(sandbox, task.verifier_kit)   # /obsspec-kit, ~/.local/bin/uv
    result = await sandbox.run_fresh(prefix + verifier_command)
    served = await served_lines(sandbox)                   # what the shims served

The prefix exports the verifier's environment: the kit's bin/ first on PATH, uv offline
against the kit's wheels (UV_OFFLINE, UV_FIND_LINKS, UV_PYTHON_DOWNLOADS=never), pip the
same (PIP_NO_INDEX, PIP_FIND_LINKS), and OBSSPEC_KIT_OFFLINE when the verifier has no
network (the apt-get shim reads it). Where the kit serves uv, uv, uvx and the installer's
`env` file are put in ~/.local/bin before the verifier starts, as if uv's installer had run:
over anything the agent left there.
"""

from __future__ import annotations

from obsspec.environments.errors import VerifierError
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.environments.verifier_kit.plan import KitPlan

KIT_ROOT = "/obsspec-kit"
SERVED_LOG = f"{KIT_ROOT}/served.log"
SERVED_LOG_MAX_BYTES = 16_384


def kit_environment(plan: KitPlan) -> dict[str, str]:
    wheels = f"{KIT_ROOT}/wheels"
    env = {
        "UV_OFFLINE": "1",
        "UV_FIND_LINKS": wheels,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": wheels,
    }
    if plan.offline:
        env["OBSSPEC_KIT_OFFLINE"] = "1"
    return env


def kit_prefix(plan: KitPlan) -> str:
    """Shell text to put before the verifier's command."""
    exports = " ".join(f"{k}={v}" for k, v in kit_environment(plan).items())
    prefix = f'export PATH={KIT_ROOT}/bin:"$PATH" {exports} && '
    if plan.uv_dir is not None:
        prefix += f'sh {KIT_ROOT}/place-uv.sh "$HOME/.local/bin" && '
    return prefix


async def serve_kit(sandbox: Sandbox, plan: KitPlan) -> str:
    """Upload the staged kit to /obsspec-kit; the prefix of the verifier's command."""
    if plan.staged is None:
        raise VerifierError("the verifier kit was planned but never staged (a bug)")
    if not plan.staged.is_dir():
        raise VerifierError(
            f"the verifier kit {plan.staged} is not on this machine: prepare it here "
            "(`obsspec env kit TASKS`) or put the cache directory where every node sees it"
        )
    await sandbox.upload(plan.staged, "/")
    return kit_prefix(plan)


async def served_lines(sandbox: Sandbox) -> list[str]:
    """What the shims served, one line each (the log's first SERVED_LOG_MAX_BYTES)."""
    raw = await sandbox.read_file(SERVED_LOG, max_bytes=SERVED_LOG_MAX_BYTES)
    if not raw:
        return []
    return raw[:SERVED_LOG_MAX_BYTES].decode(errors="replace").splitlines()
