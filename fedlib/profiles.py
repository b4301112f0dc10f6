"""Parameter profiles for the notebooks: ``smoke`` (seconds; the tests), ``book`` (the default;
minutes on 2 CPU cores) and ``paper`` (the paper's own scale; needs the data and ideally a GPU).

A notebook's ``parameters`` cell holds ``profile``, ``seed`` and overrides that default to
``None``; the next cell calls :func:`resolve`, which takes the profile's values, applies the
overrides that are not ``None`` and stops with a clear message on an unknown profile or key.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

PROFILE_NAMES = ("smoke", "book", "paper")


def resolve(profiles: Mapping[str, Mapping[str, Any]], profile: str, **overrides: Any) -> SimpleNamespace:
    """The values of ``profiles[profile]`` with the non-``None`` ``overrides`` applied.

    >>> P = resolve({"smoke": {"rounds": 2}, "book": {"rounds": 20}}, "smoke", rounds=None)
    >>> P.rounds, P.profile
    (2, 'smoke')
    >>> resolve({"book": {"rounds": 20}}, "book", rounds=5).rounds
    5
    """
    if profile not in profiles:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(profiles)}")
    values = dict(profiles[profile])
    for key, value in overrides.items():
        if key not in values:
            raise ValueError(f"unknown parameter {key!r} for profile {profile!r}; valid: {', '.join(sorted(values))}")
        if value is not None:
            values[key] = value
    return SimpleNamespace(profile=profile, **values)


def check_choice(name: str, value: Any, valid: tuple) -> Any:
    """Return ``value`` if it is one of ``valid``; else stop with a message naming both."""
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(str, valid))}")
    return value
