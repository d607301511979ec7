"""What one observation is: channels per frame, height, width, dtype and frames stacked.

An environment owns its `ObservationSpec` (`observation_spec` gives a game's); a store records
it in its manifest, and everything that sizes an array or a network from an observation reads
it from there: the store's frame field, the sampler's stacks, the augmentation's pad, the
encoder's input channels. Nothing here imports an emulator, so reading a store needs none.

* Atari 100k (`ATARI_SPEC`): one grey 84x84 uint8 frame, 4 stacked -> (4, 84, 84).
* MinAtar (`minatar_spec`): a 10x10 grid of C binary channels (4 to 10 by game), stored as uint8
  0/255 (see `sgi_lab.envs.minatar` for why), one frame -> (C, 10, 10).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "ATARI_SPEC",
    "MINATAR_CHANNELS",
    "MINATAR_MAX_CHANNELS",
    "ObservationSpec",
    "minatar_spec",
    "spec_from_json",
]


@dataclass(frozen=True)
class ObservationSpec:
    """One observation: ``frames`` stacked frames of ``channels x height x width`` ``dtype``.

    Attributes:
        channels: channels of one frame (1 for Atari's grey frame, 4-10 for MinAtar's grids).
        height: rows of a frame.
        width: columns of a frame.
        dtype: numpy dtype name of the stored pixels (``"uint8"``: values in [0, 255], which
            every encoder scales by 1/255).
        frames: frames stacked into one observation, oldest first.
    """

    channels: int
    height: int
    width: int
    dtype: str = "uint8"
    frames: int = 1

    def __post_init__(self) -> None:
        for name in ("channels", "height", "width", "frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"ObservationSpec.{name} must be a positive integer, got {value!r}"
                )
        if self.dtype != "uint8":
            raise ValueError(f"ObservationSpec.dtype must be 'uint8', got {self.dtype!r}")

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """The shape of one stored frame (a store row): ``(height, width)`` for one channel,
        the shape Atari stores have always had, else ``(channels, height, width)``."""
        if self.channels == 1:
            return (self.height, self.width)
        return (self.channels, self.height, self.width)

    @property
    def stacked_shape(self) -> tuple[int, int, int]:
        """The shape of one observation, what the encoder sees:
        ``(frames * channels, height, width)``; channels of a frame stay together, oldest
        frame first."""
        return (self.frames * self.channels, self.height, self.width)

    @property
    def input_channels(self) -> int:
        """The encoder's input channels, ``frames * channels``."""
        return self.frames * self.channels

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ATARI_SPEC = ObservationSpec(channels=1, height=84, width=84, dtype="uint8", frames=4)
"""Atari 100k: grey 84x84 frames, 4 stacked (the paper's and every Atari store's)."""

# Channels of each MinAtar game's state (MinAtar 1.0.15, ``Env.state_shape()[2]``), here so a
# store's spec is known without the optional package; tests check them against it.
MINATAR_CHANNELS: dict[str, int] = {
    "asterix": 4,
    "breakout": 4,
    "freeway": 7,
    "seaquest": 10,
    "space_invaders": 6,
}
MINATAR_SIZE = 10


MINATAR_MAX_CHANNELS = max(MINATAR_CHANNELS.values())
"""The most channels of any MinAtar game (Seaquest's 10): games padded to it share one input."""


def minatar_spec(game: str, frames: int = 1, channels: int | None = None) -> ObservationSpec:
    """The spec of a MinAtar game (its key in `MINATAR_CHANNELS`, e.g. ``"breakout"``).

    ``channels``: pad every frame with empty channels up to this many (at least the game's
    own), e.g. `MINATAR_MAX_CHANNELS` so that the five games share one input shape, as one
    batched population of all five needs; None: the game's own count.
    """
    own = MINATAR_CHANNELS[game]
    if channels is not None and (not isinstance(channels, int) or channels < own):
        raise ValueError(f"channels: at least {game}'s {own} channels, got {channels!r}")
    return ObservationSpec(channels or own, MINATAR_SIZE, MINATAR_SIZE, "uint8", frames)


def spec_from_json(payload: Any, where: str = "observation") -> ObservationSpec:
    """An `ObservationSpec` from its ``to_json`` dict; one line naming the culprit otherwise."""
    if not isinstance(payload, dict):
        raise ValueError(f"{where}: must be an object, got {payload!r}")
    known = {"channels", "height", "width", "dtype", "frames"}
    unknown = set(payload) - known
    if unknown or not {"channels", "height", "width"} <= set(payload):
        raise ValueError(
            f"{where}: needs keys channels, height, width (and dtype, frames), got {payload!r}"
        )
    try:
        return ObservationSpec(**payload)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
