"""What the launch form says about a run before it starts, and the warnings an admin must confirm.

Two launches are legitimate but easy to get wrong, so the form names them and asks for a second,
explicit click ("Launch anyway") rather than refusing them: a capped smoke run of N steps is a real
use of `max_steps`, and so is training on any pinned version. Refusing would only make the admin
re-type the same intention into another field; launching silently is what trained 48 steps when 20
epochs were asked.

- `max_steps` and `epochs` both given and disagreeing: the trainer runs `max_steps` steps whatever the
  epochs say (agent_core.training.config.sft_length), so the warning says how many steps and how many
  epochs of the pinned version that is. "Given" is a value changed from its default (the form posts
  every field): with epochs left at the default the length line still says that max_steps wins.
- SFT on a CT dataset version: CT versions hold the trajectories that failed V(s), the continual
  pre-training route; imitating them teaches the failed actions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_core.training.config import SftLength, config_fields, sft_length
from webapp.datasets.models import Dataset
from webapp.datasets.services import DatasetError, version_pin_resolve

LENGTH = "length"
CT_DATA = "ct_data"


@dataclass(frozen=True)
class LaunchWarning:
    """Something the admin confirms before the run is launched; `code` is what the confirmation names."""

    code: str
    fields: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class LaunchNotes:
    """The run's length as the form says it, and the warnings to confirm."""

    length: SftLength | None = None
    warnings: tuple[LaunchWarning, ...] = field(default=())

    @property
    def codes(self) -> str:
        """The warnings' codes, as the form's *Launch anyway* button sends them back."""
        return ",".join(w.code for w in self.warnings)

    def unconfirmed(self, confirmed: Sequence[str]) -> list[LaunchWarning]:
        """The warnings `confirmed` (codes) does not cover."""
        return [w for w in self.warnings if w.code not in confirmed]

    def by_field(self) -> dict[str, str]:
        """Each field a warning is about → its message (shown beside the field)."""
        return {f: w.message for w in self.warnings for f in w.fields}


def launch_notes(*, algorithm: str, config: Mapping[str, Any], dataset_pin: str) -> LaunchNotes:
    """The notes for an SFT launch with the validated `config` on `dataset_pin` (none for RL: its length
    is its iterations). A pin that names nothing gets no note here: the launch itself refuses it."""
    if algorithm != "sft":
        return LaunchNotes()
    version = None
    if dataset_pin.strip():
        try:
            version = version_pin_resolve(pin=dataset_pin)
        except DatasetError:
            version = None
    # One SFT example per recorded step of the version (a step with nothing to learn is skipped: "~").
    length = sft_length(config, version.num_steps if version is not None else None)
    warnings = []
    defaults = {f.name: f.default for f in config_fields(algorithm)}
    if length.disagree and config["epochs"] != defaults["epochs"]:
        message = f"epochs is {config['epochs']:g} and max_steps is {config['max_steps']}: {length.said}"
        warnings.append(LaunchWarning(LENGTH, ("max_steps", "epochs"), message))
    if version is not None and version.dataset.kind == Dataset.Kind.CT:
        message = (
            f"{dataset_pin.strip()} is a CT dataset version (continual pre-training: trajectories that "
            "failed V(s)); SFT on it imitates those failed actions. Pin an SFT version (flywheel-sft@…) "
            "unless that is what you mean"
        )
        warnings.append(LaunchWarning(CT_DATA, ("dataset",), message))
    return LaunchNotes(length=length, warnings=tuple(warnings))
