"""A number of seconds from an argument, else an environment variable, else a default: how
the Ray pool's start timeout, its keeper's poll and a join's wait for the GCS are read. Pure."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping


def seconds_setting(
    value: float | None, env_name: str, default: float, *, arg: str = "", env: Mapping[str, str] = os.environ
) -> float:
    """``value`` (the argument named ``arg``) when given, else ``env[env_name]`` when set and not
    empty, else ``default``. ValueError, naming where the value came from and what to write,
    unless it is a positive, finite number of seconds."""
    raw: float | str  # the argument, or the variable's text
    if value is not None:
        name, raw = arg or "the argument", value
    else:
        name, raw = env_name, env.get(env_name, "")
        if raw == "":
            return float(default)
    try:
        number = math.nan if isinstance(raw, bool) else float(raw)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number < math.inf:
        raise ValueError(f"{name}={raw!r}: write a positive number of seconds, such as {default:g} (the default)")
    return number
