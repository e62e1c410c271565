"""The `extractive` deriver: the sender's own first-person statements, rewritten in the third person.

Deterministic, offline and fast: "I moved to Lisbon last spring" from alice becomes "alice moved to Lisbon last
spring". Questions, greetings, requests, hedged or hypothetical sentences, sentences about the person addressed
("you") and fragments are left out: a conclusion must be a fact that stands on its own. Its cards keep the facts seen
most often (a count per entry), so a stray sentence does not push out what the peer keeps saying.
"""

from __future__ import annotations

import re
from typing import Any

from precis.memory.cards import MAX_ENTRIES, MAX_ENTRY_CHARS, norm, validate_entries
from precis.memory.engines import DeriveRequest

MAX_WORDS = 60  # longer sentences are rarely one fact
MAX_COUNTS = 4 * MAX_ENTRIES  # entries whose counts are kept (so a fact can climb back onto a full card)

_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "approx"}
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s+")
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself)\b", re.I)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|yourselves|u|ur)\b", re.I)
# Openers that carry no content: "Yes, I have two cats" is "I have two cats".
_OPENER = re.compile(
    r"^(?:(?:oh|well|so|yes|yeah|yep|no|nope|ok|okay|sure|actually|honestly|anyway|btw|also|and|but|"
    r"hi|hello|hey|haha|lol|wow|um|uh)\b[,!.]*\s+)+",
    re.I,
)
_GREETING = re.compile(
    r"^(?:hi|hello|hey|thanks|thank|bye|goodbye|good (?:morning|afternoon|evening|night)|cheers|"
    r"nice to meet|pleased to meet|welcome)\b",
    re.I,
)
_QUESTION = re.compile(
    r"^(?:(?:am|is|are|was|were|do|does|did|can|could|would|will|shall|should|may|might|must|"
    r"have|has|had|isn't|aren't|don't|doesn't|didn't|can't|won't|wouldn't|shouldn't)\b|"
    r"(?:what|why|how|where|when|who|whom|whose|which)\s+(?:am|is|are|was|were|do|does|did|can|"
    r"could|would|will|should|shall|may|might|must|have|has|had)\b)",
    re.I,
)
_COMMAND = re.compile(
    r"^(?:please|pls|let|tell|give|show|help|remind|send|write|make|find|explain|check|book|get|"
    r"take|read|list|summari[sz]e|translate|describe|recommend|suggest|call|email|text|note|"
    r"remember|save|add|set|try|look|don't|do not|never)\b",
    re.I,
)
_HEDGE = re.compile(
    r"\b(?:if|unless|whether|suppose|supposing|imagine|maybe|perhaps|possibly|probably)\b|"
    r"\bI\s+(?:might|may|could|should|guess|suppose|wonder|wish)\b|"
    r"\bI(?:'m|\s+am)\s+not\s+sure\b|\bI\s+(?:don't|do\s+not)\s+know\b|"
    r"\bI(?:'d|\s+would)\s+(?!(?:like|love|prefer|rather|hate|been|had|never|always)\b)",
    re.I,
)
_FILLER = re.compile(
    r"^(?:I(?:'m|\s+am)\s+(?:fine|good|ok|okay|sure|sorry|back|here|ready|done|in|well|alright|"
    r"all right|glad|great)(?:\s+too|,?\s+thanks)?|I\s+(?:think|hope|guess|believe)\s+so|"
    r"me\s+too|I\s+(?:see|know|agree|understand|do|did|am|was|will|can))$",
    re.I,
)

_CALL_ME = re.compile(r"^(?:please\s+)?call me\s+(\S.*)$", re.I)
# Adverbs that may stand between "I" and its verb: "I really like tea".
_ADVERBS = set(
    """
really also still usually often always never sometimes just actually only mostly generally rarely seldom definitely
totally absolutely truly even currently now normally typically occasionally barely hardly basically mainly honestly
kinda literally regularly frequently constantly especially
""".split()
)
_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "don't": "doesn't", "haven't": "hasn't", "am": "is"}
# Present-tense base forms the generic -s rule may conjugate; anything else (past tense, modals) stays as written.
_VERBS = set(
    """
like love want prefer need own study play think feel hate enjoy use speak know live work eat drink cook run walk
read write teach learn travel visit watch listen drive ride swim make take get keep believe remember plan hope try
buy sell miss wear sleep wake call stay spend fix build grow collect practice practise sing dance paint draw code
volunteer attend support follow care worry mean understand agree disagree dislike avoid adore rent share manage
lead hike bike cycle jog climb ski surf knit bake garden fish hunt train coach exercise meditate pray vote struggle
suffer deal commute belong identify consider intend tend seem look sound smell taste trust expect forget forgive
admire respect fear dread crave appreciate value celebrate recommend earn pay save invest owe
""".split()
)


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`: at line breaks and at . ! ? … followed by a space, except after abbreviations."""
    sentences: list[str] = []
    for line in text.splitlines():
        start = 0
        for end in _SENTENCE_END.finditer(line):
            before = line[start : end.start()].split()
            if before and before[-1].lower().rstrip(".") in _ABBREVIATIONS and line[end.start()] == ".":
                continue
            sentences.append(line[start : end.end()].strip())
            start = end.end()
        sentences.append(line[start:].strip())
    return [s for s in sentences if s]


def rewrite(sentence: str, observed: str) -> str | None:
    """`sentence` as a conclusion about `observed`, or None when it is not a first-person statement of fact."""
    text = _OPENER.sub("", sentence.replace("\u2019", "'").strip())
    if not text or text.rstrip().endswith("?") or not _FIRST_PERSON.search(text):
        return None
    body = text.rstrip(" .!;:,…")
    if _HEDGE.search(body) or _SECOND_PERSON.search(body) or len(body.split()) > MAX_WORDS:
        return None
    if name := _CALL_ME.match(body):  # the one request that states a fact about the sender
        return f"{observed} wants to be called {name.group(1)}"
    if _GREETING.match(body) or _QUESTION.match(body) or _COMMAND.match(body) or _FILLER.match(body):
        return None
    result = _third_person(body, observed)
    words = result.split()
    if result == body or len(words) < 3 or {w.casefold() for w in words} <= {observed.casefold(), "is"}:
        return None  # no first person after all ("i.e."), a fragment ("I agree"), or "I'm Alice" from alice
    return result


def extract(observed: str, text: str) -> list[str]:
    """The conclusions about `observed` in one of their messages, in order, without repeats."""
    found: dict[str, str] = {}
    for sentence in split_sentences(text):
        if (conclusion := rewrite(sentence, observed)) is not None:
            found.setdefault(norm(conclusion), conclusion)
    return list(found.values())


def _third_person(text: str, o: str) -> str:
    words = re.findall(r"\S+|\s+", text)
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        core, tail = _split_punct(word)
        lower = core.lower()
        if lower in ("i", "i'm", "i've", "i'd", "i'll"):
            i = _subject(words, i, lower, tail, o, out, _compound(out, o))
            continue
        if lower in ("my", "mine"):
            out.append(f"{o}'s{tail}")
        elif lower in ("me", "myself"):
            out.append(o + tail)
        else:
            out.append(word)
        i += 1
    return "".join(out)


def _subject(words: list[str], i: int, lower: str, tail: str, o: str, out: list[str], compound: bool) -> int:
    """Write the subject "I" (and its verb) at words[i]; returns the index of the next word to read."""
    if lower == "i'm":
        out.append(f"{o} is{tail}")
        return i + 1
    if lower == "i've":
        out.append(f"{o} has{tail}")
        return i + 1
    if lower == "i'll":
        out.append(f"{o} will{tail}")
        return i + 1
    if lower == "i'd":
        following = _next_word(words, i).lower()
        out.append(f"{o} {'had' if following in ('been', 'had', 'gone', 'done', 'seen') else 'would'}{tail}")
        return i + 1
    out.append(o + tail)
    if tail or compound:
        return i + 1
    j = i + 1
    # Skip adverbs to reach the verb: "I really like", "I usually work".
    while j + 1 < len(words) and words[j].isspace() and words[j + 1].lower() in _ADVERBS:
        out.extend(words[j : j + 2])
        j += 2
    if j + 1 >= len(words) or not words[j].isspace():
        return j
    verb, verb_tail = _split_punct(words[j + 1])
    if (conjugated := _conjugate(verb)) == verb:
        return j  # past tense, a modal, or a word the main loop rewrites ("I myself")
    out.extend([words[j], conjugated + verb_tail])
    return j + 2


def _conjugate(verb: str) -> str:
    """The third-person singular of a present-tense base form; any other word unchanged."""
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower not in _VERBS:
        return verb
    if re.search(r"(?:s|sh|ch|x|z|o)$", lower):
        return verb + "es"
    if re.search(r"[^aeiou]y$", lower):
        return verb[:-1] + "ies"
    return verb + "s"


def _split_punct(word: str) -> tuple[str, str]:
    match = re.match(r"^(.*?)([,;:.!?…\"')\]]*)$", word)
    return match.group(1), match.group(2)  # type: ignore[union-attr]


def _next_word(words: list[str], i: int) -> str:
    return _split_punct(words[i + 2])[0] if i + 2 < len(words) else ""


def _compound(out: list[str], o: str) -> bool:
    """Whether the next "I" ends a plural subject, whose verb stays plural: "my sister and I live" (a clause of at
    most three words and a conjunction so far), not "I like jazz and I work"."""
    clause = re.split(r"[,;:]", "".join(out))[-1].split()
    return 1 < len(clause) <= 4 and clause[-1].lower() in ("and", "or", "nor") and o not in clause


# ---------------------------------------------------------------- the card

_FAMILY = (
    r"sister|brother|siblings?|wife|husband|spouse|partner|boyfriend|girlfriend|fianc[ée]e?|friend|best friend|"
    r"mother|mom|mum|father|dad|parents?|son|daughter|child|children|kids?|baby|twin|cousin|aunt|uncle|"
    r"grandmother|grandfather|grandma|grandpa|grandparents?|grandchildren|niece|nephew|boss|manager|colleague|"
    r"coworker|co-worker|roommate|flatmate|neighbou?r|mentor|teacher|doctor|therapist|"
    r"dogs?|cats?|pets?|puppy|kitten|horses?|parrots?|rabbits?|hamsters?"
)
_NUMBER = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d+|several|many|some|no)"
_RULES: list[tuple[str, str]] = [
    (
        "INSTRUCTION",
        r"\b(?:wants|would like|prefers|asks|likes) to be (?:called|addressed|referred to)\b|"
        r"\bgoes by\b|\basks (?:that|for)\b|"
        r"\bprefers (?:\w+ ){0,2}(?:answers|responses|replies|explanations|examples|messages|emails)\b|"
        r"\bwants (?:\w+ ){0,2}(?:answers|responses|replies|explanations)\b",
    ),
    (
        "RELATIONSHIP",
        rf"^{{o}}'s (?:(?:\w+ )?(?:{_FAMILY}))\b|^{{o}} has {_NUMBER} (?:\w+ )?(?:{_FAMILY})\b|"
        r"^{o} is (?:married|engaged) to\b|^{o} is dating\b|^{o} is (?:divorced|single|a widow)",
    ),
    (
        "ATTRIBUTE",
        r"^{o} (?:really |also |still |usually |always |never |absolutely )?"
        r"(?:likes|loves|prefers|hates|enjoys|dislikes|adores|detests|avoids|can't stand|cannot stand|"
        r"doesn't (?:eat|drink|like|smoke)|does not (?:eat|drink|like|smoke)|never eats|"
        r"is allergic|is (?:a )?(?:vegan|vegetarian|pescatarian)|is lactose|is gluten|is afraid of|"
        r"is scared of|is interested in|is passionate about|is a fan of|is fluent in|speaks|plays|"
        r"collects|practi[cs]es|is learning|has been learning)\b",
    ),
    (
        "IDENTITY",
        r"^{o}'s (?:name|full name|age|birthday|pronouns|job|profession|occupation|hometown|nationality)\b|"
        r"^{o} is (?:\d+|[a-z]+-?[a-z]*) years old\b|^{o} is (?:a|an) (?!bit\b|little\b|lot\b)[\w -]+$|"
        r"^{o} (?:lives|lived|is living) in\b|^{o} (?:is|comes) from\b|^{o} was born\b|"
        r"^{o} (?:works|worked|is working) (?:as|at|for|in)\b|^{o} moved to\b|^{o} is (?:called|named)\b",
    ),
]


def classify(observed: str, conclusion: str) -> str | None:
    """The card kind of a conclusion about `observed` (IDENTITY, RELATIONSHIP, INSTRUCTION, ATTRIBUTE), or None."""
    text = " ".join(conclusion.split())
    for kind, pattern in _RULES:
        if re.search(pattern.replace("{o}", re.escape(observed)), text, re.I):
            return kind
    return None


def update_card(
    observed: str, card: list[str] | None, counts: dict[str, int], new: list[str]
) -> tuple[list[str], dict[str, int]] | None:
    """Count the new classifiable conclusions; the card is the most repeated entries (then the newest), at most 40.
    None when no new conclusion belongs on a card. Old entries without a known prefix are dropped."""
    counts = {entry: count for entry, count in counts.items() if isinstance(count, int) and count > 0}
    keys = {norm(entry): entry for entry in counts}
    for entry in validate_entries(card or []):
        keys.setdefault(norm(entry), entry)
        counts.setdefault(keys[norm(entry)], 1)
    recent: list[str] = []  # newest first
    for conclusion in new:
        kind = classify(observed, conclusion)
        entry = f"{kind}: {' '.join(conclusion.split())}" if kind else ""
        if not kind or len(entry) > MAX_ENTRY_CHARS:
            continue
        key = keys.setdefault(norm(entry), entry)
        counts[key] = counts.get(key, 0) + 1
        recent.insert(0, key)
    if not recent:
        return None
    old = [keys[norm(entry)] for entry in validate_entries(card or [])]
    order = {entry: rank for rank, entry in enumerate(dict.fromkeys([*recent, *old]))}
    ranked = sorted(counts, key=lambda e: (-counts[e], order.get(e, len(order)), e))
    kept = ranked[:MAX_COUNTS]
    return validate_entries(kept), {entry: counts[entry] for entry in kept}


class ExtractiveDeriver:
    """Conclusions and cards without a model."""

    name = "extractive"

    def derive(self, request: DeriveRequest) -> list[str]:
        """The observed sender's first-person statements across the request's messages, without repeats."""
        found: dict[str, str] = {}
        for message in request.messages:
            if message.peer_id == request.observed:
                for conclusion in extract(request.observed, message.content):
                    found.setdefault(norm(conclusion), conclusion)
        return list(found.values())

    def update_card(
        self, observed: str, card: list[str] | None, counts: dict[str, int], new: list[str]
    ) -> tuple[list[str], dict[str, int]] | None:
        return update_card(observed, card, counts, new)

    def dream(self, observed: str, premises: list[dict[str, str]], known: list[str]) -> list[dict[str, Any]]:
        """No model, no deductions: an offline dream refreshes the card only."""
        return []

    def refresh_card(
        self, observed: str, card: list[str] | None, counts: dict[str, int], conclusions: list[str]
    ) -> tuple[list[str], dict[str, int]] | None:
        """The card rebuilt from the collection's conclusions alone (counts from scratch)."""
        return update_card(observed, None, {}, conclusions)
