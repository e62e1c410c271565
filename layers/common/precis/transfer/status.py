"""A transfer job's status as the routes answer it: an export's, an import's or a peer erasure's."""

from __future__ import annotations

import json
from typing import Any

from precis.store import transfer

EXPORT, IMPORT = "export", "import"


def view(job: transfer.JobItem) -> dict[str, Any]:
    """The job's id, workspace, type, status, steps run, counts and times; an export's parts; a failed job's error."""
    answer = {
        "id": job["id"],
        "workspace_id": job["PK"].removeprefix("WS#"),
        "type": job["job_type"],
        "status": job["status"],
        "steps": int(job["step"]),
        "counts": json.loads(job["counts"]),
        "created_at": job["created_at"],
        "updated_at": job["updated_at"],
    }
    if job["job_type"] == EXPORT:
        answer["parts"] = int(job["parts"])
    if job.get("error"):
        answer["error"] = job["error"]
    return answer
