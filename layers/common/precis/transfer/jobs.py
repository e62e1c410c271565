"""Starting an export or an import, running a job's steps (the summarizer's stream consumer calls `run`), and a
job's status as the API answers it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from precis.errors import Conflict, NotFound, PrecisError, Throttled
from precis.store import transfer
from precis.store.db import Db
from precis.store.resources import require_workspace
from precis.transfer import erase, export, importer
from precis.transfer.status import EXPORT, IMPORT, view

MARGIN_S = 30.0  # a step starts only with this much of the invocation left (the first always runs)
log = logging.getLogger("precis.transfer")
Step = Callable[[Db, transfer.JobItem, dict[str, Any], dict[str, int]], tuple[dict[str, Any], bool, int]]
_STEPS: dict[str, Step] = {EXPORT: export.step, IMPORT: importer.step, erase.ERASE: erase.step}


def start_export(db: Db, ws: str) -> dict[str, Any]:
    require_workspace(db, ws)
    return view(transfer.create_job(db, ws, EXPORT))


def new_upload(db: Db, ws: str) -> dict[str, Any]:
    """Where to PUT a file to import into `ws`: its id (to start the import with) and a presigned URL."""
    require_workspace(db, ws)
    upload_id, url = transfer.upload_target(db, ws)
    return {"upload_id": upload_id, "url": url, "method": "PUT", "expires_in": transfer.URL_TTL_S}


def start_import(
    db: Db, ws: str, *, upload_id: str | None = None, export: tuple[str, str] | None = None
) -> dict[str, Any]:
    """Start importing into `ws`, which must hold no peer and no session yet, an uploaded file or a finished
    export's parts (`export`: its workspace and id; the caller may read that workspace)."""
    require_workspace(db, ws)
    if export is not None:
        source_ws, export_id = export
        job = transfer.read_job(db, source_ws, export_id, EXPORT)
        if job is None:
            raise NotFound(f"export '{export_id}' not found in workspace '{source_ws}'")
        if job["status"] != transfer.DONE:
            raise Conflict(f"export '{export_id}' is {job['status']}: import a finished export")
        sources = transfer.part_keys(source_ws, export_id, int(job["parts"]))
    else:
        sources = [transfer.upload_key(ws, upload_id or "")]
        transfer.object_size(db, sources[0])  # NotFound when nothing was uploaded
    if transfer.has_content(db, ws):
        raise Conflict(f"workspace '{ws}' already holds peers or sessions: import into a new (or empty) workspace")
    return view(transfer.create_job(db, ws, IMPORT, sources=sources))


def status(db: Db, ws: str, job_id: str, job_type: str) -> dict[str, Any]:
    job = transfer.read_job(db, ws, job_id, job_type)
    if job is None:
        raise NotFound(f"{job_type} '{job_id}' not found in workspace '{ws}'")
    answer = view(job)
    if job_type == EXPORT and job["status"] == transfer.DONE:
        # One URL a part (read them in order; their concatenation is the file an import takes).
        answer["urls"] = [transfer.presigned_get(db, k) for k in transfer.part_keys(ws, job_id, int(job["parts"]))]
        answer["expires_in"] = transfer.URL_TTL_S
    return answer


def run(db: Db, ws: str, job_id: str, step: int | None, time_left: Callable[[], float]) -> int:
    """Run the job's steps from step `step` (the one its stream record saw; None: wherever it is) while time allows;
    how many ran. A record of a step the job is past runs nothing (a redelivery, or a later record follows). Bad
    input (an error a caller is answered 4xx for, but 429) fails the job for good; any other error is raised, and
    the stream delivers the record again."""
    ran = 0
    while ran == 0 or time_left() > MARGIN_S:
        job = transfer.read_job(db, ws, job_id)
        if job is None or job["status"] != transfer.RUNNING or (step is not None and int(job["step"]) != step):
            return ran
        counts = json.loads(job["counts"])
        try:
            position, done, parts = _STEPS[job["job_type"]](db, job, json.loads(job["position"]), counts)
        except PrecisError as exc:
            if exc.status >= 500 or isinstance(exc, Throttled):
                raise  # for the stream to deliver again
            log.warning("%s %s/%s failed: %s", job["job_type"], ws, job_id, exc)
            transfer.fail_job(db, job, str(exc))
            return ran + 1
        if not transfer.advance_job(db, job, position=position, counts=counts, parts=parts, done=done):
            return ran + 1  # another run moved it first: that run goes on
        ran += 1
        if done or position.get("wait"):
            return ran  # (a step that waits for other work ends the invocation: the next record goes on)
        step = int(job["step"]) + 1
    return ran
