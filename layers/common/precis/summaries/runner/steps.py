"""The due jobs of one session in one invocation, step by step: plan a request that fits, summarize, store, audit;
or give the job up for good."""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit

from precis.concurrency import add_metric
from precis.llm import EngineError, PromptTooLong
from precis.settings import Settings
from precis.store.db import Db
from precis.store.messages import MessageItem, is_placeholder, with_bodies
from precis.store.summaries import (
    Put,
    SummaryFailureItem,
    SummaryItem,
    SummaryPart,
    clear_failure,
    put_failure,
    put_summary,
    write_audit,
)
from precis.summaries.engines import Engine, SummaryRequest, SummaryResult, word_limit
from precis.summaries.engines.prompt import build_messages, line_tokens, prompt_tokens
from precis.summaries.runner.cuts import cut_middle, cut_to_tokens
from precis.summaries.runner.outcome import Failed, SummaryOutcome, Written
from precis.summaries.strategies import (
    LONG,
    SHORT,
    JobFailure,
    MessageRef,
    Step,
    SummaryConfig,
    SummaryJob,
    failure_holds,
    next_step,
    retry_backoff_s,
)
from precis.tokens import count_text

logger = Logger(child=True)


# Left after a request for storing and auditing its summary; no request starts with less than its timeout + this.
FINISH_MARGIN_S = 10.0
# Tokens of short summaries kept for the next long one (the newest first): with the previous long summary (at most
# 4,096) they fit the default input budget of 16,000, and the parts item stays far under DynamoDB's 400 KB.
PARTS_MAX_TOKENS = 8_000


JobEnd = Literal["done", "stale", "failed", "gone", "unfinished"]


class JobRunner:
    """The due jobs of one session in one invocation, step by step.

    `limit` starts at the configured input budget and halves whenever the model says a prompt was too long, for
    the rest of the invocation (its window is smaller than configured).
    """

    def __init__(
        self,
        db: Db,
        ws: str,
        session_id: str,
        incarnation: str | None,
        config: SummaryConfig,
        settings: Settings,
        engine: Engine,
        by_seq: dict[int, MessageItem],
        remaining_s: Callable[[], float],
        clock: Callable[[], float],
        parts: list[SummaryPart],
        long_covers: int,
    ):
        self.db, self.ws, self.session_id, self.incarnation = db, ws, session_id, incarnation
        self.parts, self.long_covers = parts, long_covers  # the short summaries since the long one, and its end
        self.config, self.engine, self.by_seq = config, engine, by_seq
        self.remaining_s, self.clock = remaining_s, clock
        self.limit = settings.llm_max_input_tokens
        # Engines that call nothing remote have no timeout: their call needs no time worth reserving.
        self.call_s = float(getattr(engine, "timeout", 0.0) or 0.0)
        self.fingerprint = _fingerprint(engine, config, settings)
        self.written: list[Written] = []
        self.failed: list[Failed] = []
        self.skipped: list[str] = []
        self._contents: dict[int, str] = {}
        self._prefix_tokens: dict[str, int] = {}

    def run(
        self, jobs: list[SummaryJob], raw: dict[str, SummaryItem], markers: dict[str, SummaryFailureItem]
    ) -> SummaryOutcome:
        for index, job in enumerate(jobs):
            failure = _job_failure(markers.get(job.summary_type))
            if failure_holds(failure, job, self.fingerprint, self.clock()):
                logger.info(
                    "summary job skipped: it failed before and its back-off is running",
                    extra={
                        "session": self.session_id,
                        "summary_type": job.summary_type,
                        "first_seq": job.first_seq,
                        "retry_at": failure.retry_at,
                    },
                )
                self.skipped.append(job.summary_type)
                continue
            end = self._job(job, raw[job.summary_type]["content"] if job.previous else None, failure)
            if end == "unfinished":
                add_metric(name="SummaryJobsUnfinished", unit=MetricUnit.Count, value=len(jobs) - index)
                logger.info(
                    "summary jobs left for the next invocation: no time for another request",
                    extra={"session": self.session_id, "summary_types": [j.summary_type for j in jobs[index:]]},
                )
                return self._outcome(work_remains=True)
            if end == "gone":
                break
        return self._outcome(work_remains=False)

    def _outcome(self, *, work_remains: bool) -> SummaryOutcome:
        return SummaryOutcome(tuple(self.written), tuple(self.failed), tuple(self.skipped), work_remains)

    def _job(self, job: SummaryJob, previous: str | None, failure: JobFailure | None) -> JobEnd:
        first, previous_covers = job.first_seq, (job.previous.covers_seq if job.previous else None)
        refused: PromptTooLong | None = None  # the model's answer to the last request, when it was too long
        refused_tokens = 0
        while first <= job.through_seq:
            if self.remaining_s() < self.call_s + FINISH_MARGIN_S:
                return "unfinished"
            chain = self._chain(first, job.through_seq) if job.summary_type == LONG and first == job.first_seq else None
            step, request = self._plan_from_parts(first, previous, chain) if chain else (None, None)
            if step is None or request is None or prompt_tokens(request) > self.limit:
                chain = None  # no chain, or one too large for a request: the messages, in steps that fit
                step, request = self._plan(job, first, previous)
            if refused is not None and prompt_tokens(request) >= refused_tokens:
                # Nothing left to cut (the system prompt and the previous summary alone are too long): sending it
                # would be the same request again.
                return self._fail(job, step, request, refused, failure, previous_covers)
            try:
                result, cut_from = self._summarize(step, previous, request)
            except PromptTooLong as exc:
                refused, refused_tokens = exc, prompt_tokens(request)
                self.limit = max(1, refused_tokens // 2)
                logger.warning(
                    "prompt too long for the model; halving the input budget",
                    extra={
                        "session": self.session_id,
                        "summary_type": job.summary_type,
                        "prompt_tokens": refused_tokens,
                    },
                )
                continue
            except EngineError as exc:
                if exc.retryable:
                    add_metric(name="SummarizerErrors", unit=MetricUnit.Count, value=1)
                    raise
                return self._fail(job, step, request, exc, failure, previous_covers)
            except Exception:
                add_metric(name="SummarizerErrors", unit=MetricUnit.Count, value=1)
                raise
            put = self._store(job, step, request, result, previous_covers, cut_from, chain)
            if put is not Put.WRITTEN:
                return "gone" if put is Put.SESSION_GONE else "stale"  # stale: another invocation is ahead of us
            previous, previous_covers, first = result.text, step.through_seq, step.through_seq + 1
            refused = None
            self._contents = {s: c for s, c in self._contents.items() if s >= first}
        if failure is not None:
            clear_failure(self.db, self.ws, self.session_id, job.summary_type)
        return "done"

    def _plan(self, job: SummaryJob, first: int, previous: str | None) -> tuple[Step, SummaryRequest]:
        """The next step from `first` and its request: whole runs within `limit` (a too-large run cut to fit)."""
        left = self.remaining_s() - FINISH_MARGIN_S
        base = SummaryRequest(
            summary_type=job.summary_type,
            previous=previous,
            messages=[],
            instructions=self.config.instructions,
            word_limit=word_limit(self.config.max_output_tokens),
            max_output_tokens=self.config.max_output_tokens,
            model=self.config.model,
            temperature=self.config.temperature,
            time_limit_s=max(0.001, left) if math.isfinite(left) else None,
        )
        refs = [
            MessageRef(seq, self._line_estimate(seq), self.by_seq[seq].get("run_id"))
            for seq in range(first, job.through_seq + 1)
        ]
        room = self.limit - prompt_tokens(base)
        for _ in range(3):
            step = next_step(refs, room)
            cap = max(1, min(self.config.max_output_tokens, self._replaced(step, previous)))
            request = replace(
                base,
                messages=self._messages(step),
                word_limit=word_limit(cap),
                max_output_tokens=cap,
                dates=[self.by_seq[s].get("created_at") for s in self._shown(step)],
            )
            over = prompt_tokens(request) - self.limit
            if over <= 0 or room <= 0:
                break
            room -= over  # a line's estimate can be a token or two short (tokens merge): fit the exact count
        return step, request

    def _chain(self, first: int, through: int) -> list[SummaryPart] | None:
        """The parts whose steps read messages first..e, each starting where the one before ended, for the newest e
        <= `through` that has such a chain (oldest first); None when none reaches back to `first`."""
        by_end = {p["covers_seq"]: p for p in self.parts}
        for end in sorted((e for e in by_end if first <= e <= through), reverse=True):
            chain, part = [], by_end[end]
            while True:
                chain.append(part)
                if part["first_seq"] <= first:
                    return chain[::-1]
                before = by_end.get(part["first_seq"] - 1)
                if before is None or before["covers_seq"] < first:
                    break
                part = before
        return None

    def _plan_from_parts(
        self, first: int, previous: str | None, chain: list[SummaryPart]
    ) -> tuple[Step | None, SummaryRequest | None]:
        """The step first..e built from `chain` (no messages read), capped at what it replaces; (None, None) when the
        parts hold no text for messages that do (nothing to build from)."""
        step = Step(first, chain[-1]["covers_seq"])
        texts = [p["content"] for p in chain if p["content"]]
        replaced = self._replaced(step, previous)
        if not texts and replaced:
            return None, None
        left = self.remaining_s() - FINISH_MARGIN_S
        cap = max(1, min(self.config.max_output_tokens, replaced))
        request = SummaryRequest(
            summary_type=LONG,
            previous=previous,
            messages=[],
            instructions=self.config.instructions,
            word_limit=word_limit(cap),
            max_output_tokens=cap,
            model=self.config.model,
            temperature=self.config.temperature,
            time_limit_s=max(0.001, left) if math.isfinite(left) else None,
            summaries=texts,
            covers_tokens=replaced,
        )
        return step, request

    def _kept_parts(self, part: SummaryPart) -> list[SummaryPart]:
        """The parts item after `part` is stored: the parts no long summary covers yet, then `part`, the oldest
        dropped past PARTS_MAX_TOKENS (a long job they no longer reach reads the messages)."""
        kept = [p for p in self.parts if self.long_covers < p["covers_seq"] < part["covers_seq"]] + [part]
        while len(kept) > 1 and sum(p["token_count"] for p in kept) > PARTS_MAX_TOKENS:
            kept.pop(0)
        return kept

    def _replaced(self, step: Step, previous: str | None) -> int:
        """Tokens of what the step's summary replaces in a context: the previous summary and the step's messages."""
        return (count_text(previous) if previous else 0) + sum(
            self.by_seq[seq]["token_count"] for seq in range(step.first_seq, step.through_seq + 1)
        )

    def _summarize(self, step: Step, previous: str | None, request: SummaryRequest) -> tuple[SummaryResult, int | None]:
        """The engine's summary held to `request.max_output_tokens`, and the tokens it had when it had to be cut."""
        if self._replaced(step, previous) == 0:  # only empty messages: nothing to say, nothing to ask
            return SummaryResult(
                text="", prompt="[]", model="none", input_tokens=0, output_tokens=0, latency_ms=0.0
            ), None
        result = self.engine.summarize(request)
        tokens = count_text(result.text)
        if tokens <= request.max_output_tokens:
            return result, None
        logger.warning(
            "summary longer than its cap: cut to it",
            extra={
                "session": self.session_id,
                "summary_type": request.summary_type,
                "engine": self.engine.name,
                "tokens": tokens,
                "max_output_tokens": request.max_output_tokens,
            },
        )
        add_metric(name="SummariesCut", unit=MetricUnit.Count, value=1)
        return replace(result, text=cut_to_tokens(result.text, request.max_output_tokens)), tokens

    def _line_estimate(self, seq: int) -> int:
        """A message's cost in the prompt from its stored token count, without reading its body."""
        item = self.by_seq[seq]
        return self._prefix(item["peer_id"]) + item["token_count"] + 1

    def _prefix(self, peer: str) -> int:
        if peer not in self._prefix_tokens:
            self._prefix_tokens[peer] = line_tokens(peer, "")
        return self._prefix_tokens[peer]

    def _shown(self, step: Step) -> list[int]:
        """The step's seqs but those of deleted messages (placeholders: nothing to show)."""
        return [s for s in range(step.first_seq, step.through_seq + 1) if not is_placeholder(self.by_seq[s])]

    def _messages(self, step: Step) -> list[tuple[str, str]]:
        """(peer, content) of the step's messages, each message in `step.keep` cut to its share of tokens."""
        seqs = self._shown(step)
        missing = [self.by_seq[s] for s in seqs if s not in self._contents]
        if missing:
            views = with_bodies(self.db, missing, self.ws, self.session_id)
            self._contents.update({v["seq"]: v["content"] for v in views})
        out = []
        for seq in seqs:
            peer, content = self.by_seq[seq]["peer_id"], self._contents[seq]
            if seq in step.keep:
                content = cut_middle(content, step.keep[seq] - self._prefix(peer))
            out.append((peer, content))
        return out

    def _store(
        self,
        job: SummaryJob,
        step: Step,
        request: SummaryRequest,
        result,
        previous_covers: int | None,
        cut_from: int | None = None,
        chain: list[SummaryPart] | None = None,
    ) -> Put:
        last = self.by_seq[step.through_seq]
        token_count = count_text(result.text)
        # A step short of the job's end carries that end: the next invocation continues the job from here.
        extra = {"job_through_seq": job.through_seq} if step.through_seq < job.through_seq else None
        parts = None
        if job.summary_type == SHORT and self.config.strategy == "cadence":
            parts = self._kept_parts(
                {
                    "first_seq": step.first_seq,
                    "covers_seq": step.through_seq,
                    "content": result.text,
                    "token_count": token_count,
                }
            )
        # the id of the newest message it covers that is still there ("" when it covers only deleted ones)
        covered = reversed(range(step.first_seq, step.through_seq + 1))
        covered_id = next((self.by_seq[s]["id"] for s in covered if "id" in self.by_seq[s]), "")
        put = put_summary(
            self.db,
            self.ws,
            self.session_id,
            incarnation=self.incarnation,
            summary_type=job.summary_type,
            content=result.text,
            token_count=token_count,
            covers_seq=step.through_seq,
            # (a deleted message's place still spans its tokens, as the context's token index says)
            end_tokens=last["start_tokens"] + last.get("gap_tokens", last["token_count"]),
            message_id=covered_id,
            extra=extra,
            parts=parts,
        )
        from_parts = tuple(p["covers_seq"] for p in chain or ())
        self.written.append(
            Written(
                job.summary_type,
                step.through_seq,
                bool(put),
                job.through_seq if extra else None,
                from_parts,
                message_id=covered_id,  # (the newest covered may be a deleted message's place: no id)
            )
        )
        if put and parts is not None:
            self.parts = parts
        if put and job.summary_type == LONG:
            self.long_covers = step.through_seq
        if put:
            self._audit(
                job.summary_type,
                step.through_seq,
                "",
                {
                    **self._covers(job, step, previous_covers),
                    "from_parts": [{"first_seq": p["first_seq"], "covers_seq": p["covers_seq"]} for p in chain or ()],
                    "outcome": "written",
                    "engine": self.engine.name,
                    "model": result.model,
                    "prompt": result.prompt,
                    "output": result.text,
                    "token_count": token_count,
                    "max_output_tokens": request.max_output_tokens,
                    "output_cut_from_tokens": cut_from,
                    "usage": {"input_tokens": result.input_tokens, "output_tokens": result.output_tokens},
                    "latency_ms": result.latency_ms,
                    "attempts": result.attempts,
                },
            )
            add_metric(name="SummariesWritten", unit=MetricUnit.Count, value=1)
            add_metric(name="SummarizerInputTokens", unit=MetricUnit.Count, value=result.input_tokens)
            add_metric(name="SummarizerOutputTokens", unit=MetricUnit.Count, value=result.output_tokens)
            add_metric(name="SummarizerLatency", unit=MetricUnit.Milliseconds, value=result.latency_ms)
        elif put is Put.SESSION_GONE:
            logger.warning(
                "summary dropped: the session was deleted or created again since it was read",
                extra={"session": self.session_id, "incarnation": self.incarnation, "summary_type": job.summary_type},
            )
        logger.info(
            "summary",
            extra={
                "session": self.session_id,
                "summary_type": job.summary_type,
                "covers_seq": step.through_seq,
                "job_through_seq": job.through_seq,
                "stored": bool(put),
                "outcome": put.value,
            },
        )
        return put

    def _fail(
        self,
        job: SummaryJob,
        step: Step,
        request: SummaryRequest,
        exc: EngineError,
        failure: JobFailure | None,
        previous_covers: int | None,
    ) -> JobEnd:
        """Give the job up for good: remember it (with its back-off), audit it, log it, count it."""
        if failure is not None and failure.first_seq == step.first_seq and failure.fingerprint == self.fingerprint:
            failures = failure.failures + 1  # failed again from the same start with the same settings
        else:
            failures = 1
        retry_at = self.clock() + retry_backoff_s(failures)
        put = put_failure(
            self.db,
            self.ws,
            self.session_id,
            incarnation=self.incarnation,
            summary_type=job.summary_type,
            first_seq=step.first_seq,
            through_seq=job.through_seq,
            fingerprint=self.fingerprint,
            failures=failures,
            retry_at=retry_at,
            reason=str(exc),
        )
        if put is Put.SESSION_GONE:
            return "gone"  # nothing to keep current any more
        self._audit(
            job.summary_type,
            job.through_seq,
            "failed-",
            {
                **self._covers(job, step, previous_covers),
                "outcome": "failed",
                "engine": self.engine.name,
                "error": str(exc),
                "error_type": type(exc).__name__,
                "failures": failures,
                "retry_at": datetime.fromtimestamp(retry_at, UTC).isoformat(),
                "prompt": json.dumps(build_messages(request), ensure_ascii=False),
            },
        )
        logger.error(
            "summary job failed for good; it is retried when it changes or after its back-off",
            extra={
                "session": self.session_id,
                "summary_type": job.summary_type,
                "first_seq": step.first_seq,
                "through_seq": job.through_seq,
                "error": str(exc),
                "failures": failures,
                "retry_at": retry_at,
            },
        )
        add_metric(name="SummaryJobsFailed", unit=MetricUnit.Count, value=1)
        self.failed.append(Failed(job.summary_type, step.first_seq, job.through_seq, str(exc)))
        return "failed"

    def _covers(self, job: SummaryJob, step: Step, previous_covers: int | None) -> dict[str, Any]:
        return {
            "workspace_id": self.ws,
            "session_id": self.session_id,
            "incarnation": self.incarnation,
            "summary_type": job.summary_type,
            "covers": {
                "first_seq": step.first_seq,
                "through_seq": step.through_seq,
                "previous_covers_seq": previous_covers,
            },
            "job": {"first_seq": job.first_seq, "through_seq": job.through_seq},
            "cut": {str(seq): tokens for seq, tokens in step.keep.items()},
        }

    def _audit(self, summary_type: str, covers_seq: int, prefix: str, record: dict[str, Any]) -> None:
        record["created_at"] = datetime.now(UTC).isoformat()
        write_audit(
            self.db,
            self.ws,
            self.session_id,
            summary_type,
            covers_seq,
            prefix + secrets.token_hex(4),
            record,
            incarnation=self.incarnation or "_",
        )


def _job_failure(marker: SummaryFailureItem | None) -> JobFailure | None:
    if marker is None:
        return None
    return JobFailure(marker["first_seq"], marker["fingerprint"], marker["failures"], float(marker["retry_at"]))


def _fingerprint(engine: Engine, config: SummaryConfig, settings: Settings) -> str:
    """What a job's failure may depend on besides its messages: the engine and the settings that shape requests."""
    shape = [
        engine.name,
        config.model or settings.model_for("summaries"),
        settings.llm_base_url,
        config.instructions,
        config.max_output_tokens,
        config.temperature,
        settings.llm_max_input_tokens,
    ]
    if (settings.summaries_provider or settings.llm_provider) == "bedrock":  # openai's fingerprints stay as they were
        shape += ["bedrock", settings.bedrock_region]
    return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:16]
