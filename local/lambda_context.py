"""A stand-in for the Lambda context object, with the attributes Powertools reads."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass
class LambdaContext:
    function_name: str
    timeout_s: int = 15
    memory_limit_in_mb: int = 512
    region: str = "us-east-1"
    account: str = "123456789012"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self.invoked_function_arn = f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"
        self.function_version = "$LATEST"
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
