"""PRECIS_LOCAL_CHAOS: make the local stack as harsh as AWS, where moto is kind.

- `replay`: every stream batch is delivered twice (Lambda's event-source mapping is at-least-once).
- `shards`: the stream's records are spread over virtual shards by partition key, each delivered by its own
  thread, so records of different partitions (a session's delete, its messages) arrive in either order.
- `throttle`: a fraction of the functions' DynamoDB calls are refused for capacity, as DynamoDB does.
- `lag`: writes reach the vector indexes seconds late (`PRECIS_LOCAL_CHAOS_LAG_S`) instead of the usual half second
  (`PRECIS_LOCAL_VECTOR_LAG_S`, chaos or not): DynamoDB replicates into them asynchronously.
- `approximate`: SearchVectors leaves out a share of the true nearest neighbours, as an approximate index does.

Read once by `make dev`; the poller and the moto server act on it, both in that process.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

MODES = ("replay", "shards", "throttle", "lag", "approximate")
DEFAULT_THROTTLE_RATE = 0.05
DEFAULT_VECTOR_LAG_S = 0.5
DEFAULT_LAG_S = 5.0
DEFAULT_APPROXIMATE = 0.1
VIRTUAL_SHARDS = 4


class ChaosError(ValueError):
    """A PRECIS_LOCAL_CHAOS* variable the stack cannot honour; the message names the variable."""


@dataclass(frozen=True)
class Chaos:
    modes: frozenset[str] = frozenset()
    throttle_rate: float = DEFAULT_THROTTLE_RATE  # fraction of the functions' DynamoDB calls refused
    seed: int = 0  # seeds the dice (throttling, approximate searches) and the virtual shards, so a run repeats
    virtual_shards: int = VIRTUAL_SHARDS
    vector_lag_s: float = DEFAULT_VECTOR_LAG_S  # how late a write reaches the vector indexes, always
    lag_s: float = DEFAULT_LAG_S  # ... and with `lag`
    approximate_share: float = DEFAULT_APPROXIMATE  # true neighbours `approximate` leaves out

    @property
    def index_lag_s(self) -> float:
        """How late a write reaches the vector indexes."""
        return self.lag_s if "lag" in self.modes else self.vector_lag_s

    @property
    def replay(self) -> bool:
        return "replay" in self.modes

    @property
    def shards(self) -> bool:
        return "shards" in self.modes

    @property
    def throttle(self) -> bool:
        return "throttle" in self.modes

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Chaos:
        """The chaos `env` asks for; ChaosError for an unknown mode or a malformed setting."""
        names = [n.strip().lower() for n in env.get("PRECIS_LOCAL_CHAOS", "").split(",") if n.strip()]
        unknown = [n for n in names if n not in MODES]
        if unknown:
            raise ChaosError(
                f"PRECIS_LOCAL_CHAOS: unknown mode {', '.join(map(repr, unknown))} (known: {', '.join(MODES)})"
            )
        rate = _number(env, "PRECIS_LOCAL_CHAOS_THROTTLE", DEFAULT_THROTTLE_RATE, 1.0)
        share = _number(env, "PRECIS_LOCAL_CHAOS_APPROXIMATE", DEFAULT_APPROXIMATE, 1.0)
        vector_lag = _number(env, "PRECIS_LOCAL_VECTOR_LAG_S", DEFAULT_VECTOR_LAG_S, 300.0)
        lag = _number(env, "PRECIS_LOCAL_CHAOS_LAG_S", DEFAULT_LAG_S, 300.0)
        raw_seed = env.get("PRECIS_LOCAL_CHAOS_SEED", "").strip()
        try:
            # Without a seed each run draws one, and `describe` prints it so the run can be repeated.
            seed = int(raw_seed) if raw_seed else random.SystemRandom().randrange(10**6)
        except ValueError:
            raise ChaosError(f"PRECIS_LOCAL_CHAOS_SEED: an integer, got {raw_seed!r}") from None
        return cls(frozenset(names), rate, seed, vector_lag_s=vector_lag, lag_s=lag, approximate_share=share)

    def describe(self) -> str:
        """One line for the log: which modes are on, with their settings."""
        if not self.modes:
            return "chaos: off"
        parts = [m for m in MODES if m in self.modes]
        if self.shards:
            parts[parts.index("shards")] = f"shards ({self.virtual_shards} virtual shards)"
        if self.throttle:
            share = f"{self.throttle_rate * 100:g}%"
            parts[parts.index("throttle")] = f"throttle ({share} of the functions' DynamoDB calls)"
        if "lag" in self.modes:
            parts[parts.index("lag")] = f"lag (writes reach the vector indexes {self.lag_s:g} s late)"
        if "approximate" in self.modes:
            share = f"{self.approximate_share * 100:g}%"
            parts[parts.index("approximate")] = f"approximate ({share} of the nearest neighbours left out)"
        return f"chaos: {', '.join(parts)}; PRECIS_LOCAL_CHAOS_SEED={self.seed}"


def _number(env: Mapping[str, str], name: str, default: float, most: float) -> float:
    """A number between 0 and `most` from `env[name]`, `default` when unset; ChaosError naming it otherwise."""
    raw = env.get(name, "").strip()
    what = "a fraction between 0 and 1" if most == 1.0 else f"seconds between 0 and {most:g}"
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ChaosError(f"{name}: {what}, got {raw!r}") from None
    if not 0 <= value <= most:
        raise ChaosError(f"{name}: {what}, got {raw!r}")
    return value
