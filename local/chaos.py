"""PRECIS_LOCAL_CHAOS: make the local stack as harsh as AWS, where moto is kind.

- `replay`: every stream batch is delivered twice (Lambda's event-source mapping is at-least-once).
- `shards`: the stream's records are spread over virtual shards by partition key, each delivered by its own
  thread, so records of different partitions (a session's delete, its messages) arrive in either order.
- `throttle`: a fraction of the functions' DynamoDB calls are refused for capacity, as DynamoDB does.

Read once by `make dev`; the poller and the moto server act on it, both in that process.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

MODES = ("replay", "shards", "throttle")
DEFAULT_THROTTLE_RATE = 0.05
VIRTUAL_SHARDS = 4


class ChaosError(ValueError):
    """A PRECIS_LOCAL_CHAOS* variable the stack cannot honour; the message names the variable."""


@dataclass(frozen=True)
class Chaos:
    modes: frozenset[str] = frozenset()
    throttle_rate: float = DEFAULT_THROTTLE_RATE  # fraction of the functions' DynamoDB calls refused
    seed: int = 0  # seeds the throttling dice and the choice of virtual shard, so a run can be repeated
    virtual_shards: int = VIRTUAL_SHARDS

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
            raise ChaosError(f"PRECIS_LOCAL_CHAOS: unknown mode {', '.join(map(repr, unknown))} "
                             f"(known: {', '.join(MODES)})")
        raw_rate = env.get("PRECIS_LOCAL_CHAOS_THROTTLE", "").strip()
        try:
            rate = float(raw_rate) if raw_rate else DEFAULT_THROTTLE_RATE
        except ValueError:
            raise ChaosError(f"PRECIS_LOCAL_CHAOS_THROTTLE: a fraction between 0 and 1, got {raw_rate!r}") from None
        if not 0 <= rate <= 1:
            raise ChaosError(f"PRECIS_LOCAL_CHAOS_THROTTLE: a fraction between 0 and 1, got {raw_rate!r}")
        raw_seed = env.get("PRECIS_LOCAL_CHAOS_SEED", "").strip()
        try:
            # Without a seed each run draws one, and `describe` prints it so the run can be repeated.
            seed = int(raw_seed) if raw_seed else random.SystemRandom().randrange(10**6)
        except ValueError:
            raise ChaosError(f"PRECIS_LOCAL_CHAOS_SEED: an integer, got {raw_seed!r}") from None
        return cls(frozenset(names), rate, seed)

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
        return f"chaos: {', '.join(parts)}; PRECIS_LOCAL_CHAOS_SEED={self.seed}"
