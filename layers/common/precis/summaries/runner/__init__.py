"""Keeping a session's summaries current: read what the strategy needs, decide, summarize in steps, store, audit.

Called by the stream consumer once per session touched by a batch, through `summarize_under_lease`: one invocation
at a time summarizes a session (with ParallelizationFactor > 1 a session's records reach several concurrent batches),
and one that finds it busy leaves the work to the holder instead of paying for the same LLM call. Stream delivery is
at-least-once and a lease can outlive its holder's view of the session, so every summary write is still conditional
and bound to the session's incarnation (see `store.summaries.put_summary`).

Output: no stored summary holds more tokens (tiktoken o200k, as the context counts them) than the request's cap: the
configured `max_output_tokens`, or the tokens of what the summary replaces (the previous summary + the step's
messages) when that is less, so a summary never takes more of a context than the history it stands for. The cap is
sent to the engine (the LLM's max_tokens, the extractive word limit), and a text still over it (a model whose
tokenizer differs from o200k, a server that ignores max_tokens) is cut to it here; a step that replaces nothing
(empty messages only) stores an empty summary without a request.

Long cadence summaries are built from the short ones, so the messages are read once, by the short chain: each short
summary stored is also kept in the session's parts item (`store.summaries.SummaryPart`: its text and the messages
its step read, in the same transaction as the summary), for as long as no long summary covers it. A long job over
messages first..through is then one request: the previous long summary and the chain of parts whose steps read
first..e, e the newest part's end at or before `through` (each part's step starts where the one before ended), then
the messages after e (none when the short chain is current). Where no chain reaches back to `first` (the short job
failed or is backing off, a clone or a session summarized before parts existed, a bulk write whose short step
jumped past the long's end), or the chain does not fit the input budget, the long job reads the messages, as it
always did. The long summary's cap is what it replaces: the previous long summary and the messages first..e.

Size: no request holds more than `llm_max_input_tokens` of prompt (system, previous summary, messages). A larger
job runs as steps (previous summary + the next whole runs that fit → intermediate summary → …), and each step's
summary is stored as soon as it ends, with the job's end on it, so a later invocation continues from it
(`strategies.decide`). A model that still answers "context length exceeded" gets half as much, never the same
request again.

Time: `remaining_s` says how long the invocation has left. No request starts unless one call of the engine
(its timeout) and the margin to store the result fit before then, and the engine's retries stop in time too.

Failures: a retryable engine error raises (the stream retries, then dead-letters; what was stored stays). Any other
(a 400/401/404, or a prompt that cannot shrink further) ends the job for good: an audit record (S3, under the
session's audit prefix, `…-failed-….json`), an error log line and the metric `SummaryJobsFailed`; the stream record
succeeds, so one bad job is never a poison pill. A marker in the summary store remembers the failure, so later
messages do not send the same doomed request again: the job is tried again once it starts elsewhere (a concurrent
invocation stored progress), once its settings change (engine, model, endpoint, instructions, output cap, input
budget: a fix takes effect at the next message), or once its back-off ends (10 minutes, doubling per failure in a
row, at most a day: a fixed API key or a model back in service shows up without a new message setting).

Its modules: `session` (the stream consumer's way in, and one session's due jobs), `steps` (a job's steps: plan,
summarize, store, audit, or give up), `outcome` (what a call did) and `cuts` (a text cut to a number of tokens).
"""

from precis.summaries.runner.cuts import cut_to_tokens
from precis.summaries.runner.outcome import Failed, SummaryOutcome, Written
from precis.summaries.runner.session import MAX_LEASE_S, summarize_session, summarize_under_lease
from precis.summaries.runner.steps import FINISH_MARGIN_S, PARTS_MAX_TOKENS

__all__ = [
    "FINISH_MARGIN_S",
    "MAX_LEASE_S",
    "PARTS_MAX_TOKENS",
    "Failed",
    "SummaryOutcome",
    "Written",
    "cut_to_tokens",
    "summarize_session",
    "summarize_under_lease",
]
