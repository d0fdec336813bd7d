"""Coordinate spaces of model outputs and their exact mapping to screen pixels.

A model names a point in one of three spaces (`COORD_SPACES`):

* ``smart_resize`` — pixels of the image the model saw: the screenshot resized by `smart_resize`
  (Qwen2-VL / UI-TARS-1.5). Its extent is (W', H') = smart_resize of the screen. A checkpoint whose
  processor resizes within other pixel limits names them: ``smart_resize:<min_pixels>:<max_pixels>``
  (`agent_core.policies.vision.ImageSpec.coord_space`). Bare ``smart_resize`` has UI-TARS-1.5's limits
  (its action parser: 78,400 to 12,845,056 pixels); Qwen2.5-VL's processors resize from 3,136
  (``smart_resize:3136:12845056``), which differs on screens under 78,400 pixels.
* ``relative`` — 0–1000 on each axis of the screen (UI-TARS-1.0, many other VLMs). Extent (1000, 1000).
* ``absolute`` — screen pixels. Extent (W, H).

Rules, per axis, with screen size S (W or H) and model extent E:

* `to_screen`: a model value v must satisfy 0 <= v <= E (ints or finite floats); the screen pixel is
  ``min(S - 1, floor(v * S / E + 1/2))``, computed with exact rational arithmetic (so half-way cases
  always round up and floats give no surprises).
* `from_screen`: a screen pixel p (clamped onto the screen first, as `to_screen` clamps) becomes the
  integer model value n nearest to ``p * E / S`` among those that `to_screen` maps closest to p.
  When E >= S (the model space is at least as fine as the screen) `to_screen(from_screen(p)) == p`
  exactly. When E < S some pixels cannot be named; the error is then at most
  ``ceil(S / (2 * E))`` pixels, so at most ``ceil(S / 1000)`` for ``relative``.
"""

from __future__ import annotations

import math
import reprlib
from fractions import Fraction
from functools import lru_cache

COORD_SPACES: tuple[str, ...] = ("smart_resize", "relative", "absolute")
RELATIVE_EXTENT = 1000

IMAGE_FACTOR = 28
MIN_PIXELS = 100 * IMAGE_FACTOR * IMAGE_FACTOR  # 78_400
MAX_PIXELS = 16384 * IMAGE_FACTOR * IMAGE_FACTOR  # 12_845_056
MAX_RATIO = 200


def _round_by_factor(number: float, factor: int) -> int:
    return round(number / factor) * factor


def _ceil_by_factor(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def _floor_by_factor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int = IMAGE_FACTOR,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """(height, width) of the image a Qwen2-VL / UI-TARS-1.5 model sees for a height x width input."""
    for name, value in (("height", height), ("width", width), ("factor", factor)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not 0 < min_pixels <= max_pixels:
        raise ValueError(f"need 0 < min_pixels <= max_pixels, got {min_pixels}, {max_pixels}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    # Floating-point steps mirror the reference implementation so results agree bit for bit.
    h_bar = max(factor, _round_by_factor(height, factor))
    w_bar = max(factor, _round_by_factor(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        # max(factor, …) only matters for tiny custom max_pixels, where the reference would return 0.
        h_bar = max(factor, _floor_by_factor(height / beta, factor))
        w_bar = max(factor, _floor_by_factor(width / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = _ceil_by_factor(height * beta, factor)
        w_bar = _ceil_by_factor(width * beta, factor)
    return h_bar, w_bar


def _check_screen(screen: tuple[int, int]) -> tuple[int, int]:
    if not isinstance(screen, tuple | list) or len(screen) != 2:
        raise ValueError(f"screen must be (width, height), got {reprlib.repr(screen)}")
    width, height = screen
    for name, value in (("width", width), ("height", height)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"screen {name} must be a positive integer, got {reprlib.repr(value)}")
    return width, height


def parse_space(space: str) -> tuple[str, int, int]:
    """(name, min_pixels, max_pixels) of a coordinate space; ValueError naming what is wrong."""
    if space in COORD_SPACES:
        return space, MIN_PIXELS, MAX_PIXELS
    name, _, limits = str(space).partition(":")
    if name == "smart_resize" and limits:
        low, _, high = limits.partition(":")
        if low.isdigit() and high.isdigit() and 0 < int(low) <= int(high):
            return name, int(low), int(high)
        raise ValueError(
            f"coordinate space {space!r}: need smart_resize:<min_pixels>:<max_pixels>, 0 < min <= max"
        )
    raise ValueError(
        f"unknown coordinate space {space!r}; valid: {', '.join(COORD_SPACES)}, smart_resize:<min>:<max>"
    )


def is_space(space: object) -> bool:
    """Whether `space` names a coordinate space."""
    try:
        parse_space(space)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True


def _check_space(space: str) -> None:
    parse_space(space)


@lru_cache(maxsize=64)
def _extent(width: int, height: int, space: str) -> tuple[int, int]:
    name, low, high = parse_space(space)
    if name == "smart_resize":
        h_bar, w_bar = smart_resize(height, width, min_pixels=low, max_pixels=high)
        return w_bar, h_bar
    if space == "relative":
        return RELATIVE_EXTENT, RELATIVE_EXTENT
    return width, height


def model_size(*, screen: tuple[int, int], space: str) -> tuple[int, int]:
    """(width, height) extent of the model's coordinate space for a screen of (width, height)."""
    _check_space(space)
    width, height = _check_screen(screen)
    return _extent(width, height, space)


def _exact(value: object, axis: str, extent: int, space: str) -> tuple[int, int]:
    """`value` as an exact ratio (numerator, denominator), checked to lie in [0, extent]."""
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ValueError(f"{axis} must be a number, got {reprlib.repr(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{axis} must be finite, got {value!r}")
    num, den = (value, 1) if isinstance(value, int) else value.as_integer_ratio()
    if not 0 <= num <= extent * den:
        raise ValueError(f"{axis}={value} is outside [0, {extent}] of the {space} space")
    return num, den


def _axis_to_screen(num: int, den: int, size: int, extent: int) -> int:
    # floor(v * size / extent + 1/2) with v = num / den, in integers so no rounding ever creeps in.
    return min(size - 1, (2 * num * size + den * extent) // (2 * den * extent))


def to_screen(
    x: float | Fraction, y: float | Fraction, *, screen: tuple[int, int], space: str
) -> tuple[int, int]:
    """Screen pixel (x, y) of a model point; raises ValueError when it lies outside the model space."""
    _check_space(space)
    width, height = _check_screen(screen)
    ext_w, ext_h = _extent(width, height, space)
    x_ratio = _exact(x, "x", ext_w, space)
    y_ratio = _exact(y, "y", ext_h, space)
    return _axis_to_screen(*x_ratio, width, ext_w), _axis_to_screen(*y_ratio, height, ext_h)


def _axis_from_screen(pixel: int, size: int, extent: int) -> int:
    pixel = min(max(pixel, 0), size - 1)
    # The ideal model value is pixel * extent / size. The pixel's pre-image is an interval around it:
    # if that interval holds any integer, it holds the floor or the ceiling of the ideal value.
    low = pixel * extent // size
    high = -(-pixel * extent // size)
    return min(
        (low, high),
        key=lambda n: (abs(_axis_to_screen(n, 1, size, extent) - pixel), abs(n * size - pixel * extent), n),
    )


def from_screen(x: int, y: int, *, screen: tuple[int, int], space: str) -> tuple[int, int]:
    """Integer model coordinates of screen pixel (x, y); exact whenever the space is as fine as the screen."""
    _check_space(space)
    width, height = _check_screen(screen)
    for axis, value in (("x", x), ("y", y)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"screen {axis} must be an integer, got {reprlib.repr(value)}")
    ext_w, ext_h = _extent(width, height, space)
    return _axis_from_screen(x, width, ext_w), _axis_from_screen(y, height, ext_h)
