"""The verifier kit's modes, and what it holds for one task (the record a Task carries)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field

from obsspec.config import StrictModel


class KitMode(StrEnum):
    auto = "auto"
    on = "on"
    off = "off"


KIT_MODE_HELP = (
    "When verifiers get what they download at verify time (uv, its installer, pinned Python "
    "packages) from a kit prepared on this machine: auto, verifiers without a network "
    "(--network none); on, every verifier (the same bytes every time); off, none"
)


class KitPlan(StrictModel):
    """What the kit serves one task's verifier: host paths, uploaded after the agent phase."""

    needs: dict = Field(description="What the verifier fetches (KitNeeds.as_dict()).")
    uv_version: str | None = None
    uv_dir: Path | None = Field(default=None, description="Holds the uv and uvx binaries.")
    wheels: tuple[Path, ...] = ()
    offline: bool = Field(
        default=True, description="The verifier has no network: apt-get is served too."
    )
    staged: Path | None = Field(
        default=None, description="The obsspec-kit folder to upload (verifier_kit.stage)."
    )
    problems: tuple[str, ...] = Field(
        default=(), description="What the kit could not fetch (the verifier will miss it)."
    )
    notes: tuple[str, ...] = Field(
        default=(), description="What the kit never serves but the sandbox may have."
    )

    def summary(self) -> dict:
        """What `env validate --json` and the dataset record of the kit."""
        return {
            "uv": self.uv_version,
            "wheels": sorted(p.name for p in self.wheels),
            "problems": list(self.problems),
            "notes": list(self.notes),
        }
