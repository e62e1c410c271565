"""The retrieval benchmark's data: long conversations between two peers over months, with questions whose answering
turns are known (in the manner of LoCoMo), generated at run time from a seed: nothing is downloaded or shipped.

Each conversation has 15-30 dated sessions of chit-chat. Into it go facts about both peers: stated once and referred
to later in other words; facts that change (a move, a new job: the newer turn answers "now"); events with relative
("last Tuesday") and absolute ("in March") dates; and distractors (the other peer has facts of the same kinds,
friends and relatives share first names, the other peer's name belongs to a coworker too). Questions are worded as a
user would ask them, from templates chosen independently of the turn's wording, so some share words with the turns
that answer them and some share none: `single` (one turn), `multi` (the answer is spread over 2+ turns) and
`temporal` (when did...; what did X do after...).

`generate(count, seed, sessions_scale)` -> list[Conversation]; the same arguments give the same conversations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

KINDS = ("single", "multi", "temporal")


@dataclass(frozen=True)
class Turn:
    id: str  # "D<session>:<turn>", as LoCoMo numbers its dialogue turns
    session: str
    speaker: str
    text: str
    created_at: str  # ISO 8601, UTC


@dataclass(frozen=True)
class Question:
    id: str
    kind: str  # single, multi or temporal
    about: str  # the peer the question is about
    text: str
    answer: str
    turns: tuple[str, ...]  # the ids of the turns that answer it


@dataclass
class Conversation:
    id: str
    peers: tuple[str, str]
    sessions: list[tuple[str, str]]  # (session id, ISO start time), in time order
    turns: list[Turn]
    questions: list[Question]

    def turn(self, turn_id: str) -> Turn:
        return next(t for t in self.turns if t.id == turn_id)


# ---------------------------------------------------------------- vocabulary

NAMES = (
    "Caroline",
    "Melanie",
    "Jon",
    "Gina",
    "Maria",
    "John",
    "Joanna",
    "Nate",
    "Tim",
    "Audrey",
    "Andrew",
    "Evan",
    "Sam",
    "Dave",
    "Calvin",
    "Deborah",
    "James",
    "Jolene",
    "Priya",
    "Tom",
    "Lena",
    "Marcus",
    "Sofia",
    "Omar",
    "Hannah",
    "Ravi",
    "Chloe",
    "Diego",
    "Nina",
    "Felix",
    "Grace",
    "Leo",
    "Ivy",
    "Kai",
    "Rosa",
    "Ben",
)
FRIEND_NAMES = (
    "Sam",
    "Alex",
    "Jordan",
    "Chris",
    "Taylor",
    "Maya",
    "Luke",
    "Emma",
    "Noah",
    "Zoe",
    "Ella",
    "Max",
    "Ruby",
    "Owen",
    "Lily",
    "Jack",
)
CITIES = (
    "Lisbon",
    "Denver",
    "Toronto",
    "Austin",
    "Leeds",
    "Porto",
    "Seattle",
    "Melbourne",
    "Edinburgh",
    "Dublin",
    "Boston",
    "Valencia",
    "Munich",
    "Portland",
    "Halifax",
    "Adelaide",
    "Bristol",
    "Minneapolis",
    "Lyon",
    "Vancouver",
)
# (title, workplace, a word for the work, what a day there is like)
JOBS = (
    ("nurse", "the children's hospital", "shifts on the ward", "patients"),
    ("software developer", "a logistics startup", "code reviews", "deploys"),
    ("chemistry teacher", "Westfield High", "grading lab reports", "students"),
    ("accountant", "a small tax firm", "quarterly filings", "clients"),
    ("line cook", "an Italian restaurant", "the dinner rush", "orders"),
    ("graphic designer", "an ad agency", "client mockups", "briefs"),
    ("physiotherapist", "a sports clinic", "rehab sessions", "patients"),
    ("librarian", "the public library", "the children's reading hour", "patrons"),
    ("electrician", "a construction company", "rewiring jobs", "sites"),
    ("veterinary assistant", "an animal clinic", "vaccination days", "animals"),
    ("journalist", "the local paper", "deadlines", "sources"),
    ("pharmacist", "a neighbourhood pharmacy", "prescriptions", "customers"),
    ("architect", "a design studio", "site visits", "drawings"),
    ("paramedic", "the ambulance service", "night calls", "callouts"),
    ("data analyst", "an insurance company", "dashboards", "reports"),
    ("barista", "a coffee roastery", "the morning rush", "regulars"),
)
# (the animal as said in passing, its category as a question would name it)
PETS = (
    ("beagle", "dog"),
    ("labrador", "dog"),
    ("border collie", "dog"),
    ("dachshund", "dog"),
    ("greyhound", "dog"),
    ("tabby", "cat"),
    ("Siamese", "cat"),
    ("Maine Coon", "cat"),
    ("lop-eared rabbit", "rabbit"),
    ("cockatiel", "bird"),
    ("budgie", "bird"),
    ("tortoise", "reptile"),
    ("bearded dragon", "reptile"),
    ("hamster", "rodent"),
)
PET_NAMES = (
    "Biscuit",
    "Pepper",
    "Luna",
    "Milo",
    "Ziggy",
    "Mochi",
    "Olive",
    "Rufus",
    "Pickle",
    "Juniper",
    "Oscar",
    "Nala",
    "Waffles",
    "Clementine",
    "Bruno",
    "Pumpkin",
)
TRICKS = {
    "dog": (
        "roll over",
        "shake hands",
        "fetch the newspaper",
        "sit on command",
        "ring a bell by the door",
        "walk on a leash without pulling",
    ),
    "cat": ("high-five", "come when called", "sit for treats", "jump through a hoop"),
    "bird": ("whistle a tune", "say hello", "step up onto my finger"),
    "rabbit": ("use the litter box", "jump over a little fence", "come when called"),
    "reptile": ("eat from my hand", "recognise the feeding spoon"),
    "rodent": ("run through a cardboard maze", "come out when called"),
}
# (activity as its doer says it, what a question calls it, where)
HOBBIES = (
    ("pottery", "ceramics", "a studio downtown"),
    ("bouldering", "rock climbing", "the climbing gym"),
    ("salsa dancing", "dance classes", "a community hall"),
    ("watercolour painting", "art", "an evening class"),
    ("birdwatching", "bird spotting", "the wetlands"),
    ("woodworking", "carpentry", "my garage"),
    ("sourdough baking", "bread making", "my kitchen"),
    ("open water swimming", "swimming", "the lake"),
    ("chess", "board games", "a club at the library"),
    ("knitting", "needlework", "a knitting circle"),
    ("trail running", "running", "the hills"),
    ("photography", "taking pictures", "the old harbour"),
    ("gardening", "growing vegetables", "an allotment"),
    ("archery", "target shooting", "a range"),
)
FOODS = (
    "ramen",
    "paella",
    "butter chicken",
    "pho",
    "lasagne",
    "tacos al pastor",
    "sushi",
    "pierogi",
    "falafel",
    "shakshuka",
    "bibimbap",
    "moussaka",
    "pad thai",
    "mac and cheese",
    "jollof rice",
    "dumplings",
)
ALLERGIES = (
    ("peanuts", "nuts"),
    ("shellfish", "seafood"),
    ("cats", "cat hair"),
    ("pollen", "hay fever"),
    ("penicillin", "antibiotics"),
    ("strawberries", "berries"),
    ("bee stings", "bees"),
)
INSTRUMENTS = ("guitar", "piano", "violin", "cello", "drums", "ukulele", "saxophone", "trumpet", "flute", "banjo")
COUNTRIES = (
    "Japan",
    "Iceland",
    "Peru",
    "Morocco",
    "Vietnam",
    "Portugal",
    "New Zealand",
    "Greece",
    "Mexico",
    "Norway",
    "Kenya",
    "Croatia",
    "Chile",
    "Scotland",
)
BOOKS = (
    "The Overstory",
    "Piranesi",
    "Educated",
    "Circe",
    "The Martian",
    "Dune",
    "Station Eleven",
    "Normal People",
    "Project Hail Mary",
    "Sapiens",
    "The Midnight Library",
    "Klara and the Sun",
)
CARS = (
    "a used Honda Civic",
    "an electric Nissan Leaf",
    "a red Mazda 3",
    "a Subaru Outback",
    "a Toyota Prius",
    "a Volkswagen Golf",
    "a vintage Volvo estate",
)
RELATIVES = ("sister", "brother", "cousin", "aunt", "uncle")
RACES = ("half marathon", "10k fun run", "charity bike ride", "sprint triathlon", "5k park run")
SHOWS = (
    "a cooking show",
    "a detective series",
    "a nature documentary",
    "the new fantasy series",
    "a baking contest",
    "an old sitcom",
    "a true crime podcast",
    "a space documentary",
)
ACTIVITIES = (
    "went for a long walk",
    "cleaned the whole flat",
    "tried a new recipe",
    "had friends over for dinner",
    "went to the farmers market",
    "watched the football",
    "finally fixed the leaky tap",
    "spent the day at the beach",
    "visited my parents",
    "went to a street festival",
    "did a puzzle all afternoon",
    "painted the spare room",
    "went to a board game cafe",
    "repotted all the plants",
    "took a day trip to the countryside",
    "slept in and read",
)
WEATHER = ("rainy", "freezing", "gorgeous", "humid", "windy", "grey", "sunny", "stormy")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ORDINALS = {1: "first", 2: "second", 3: "third"}

# Chit-chat, by the speaker; {other} is the other peer's name.
FILLER = (
    "Morning! I just got back from {activity_place}.",
    "It has been {weather} here all week, I'm over it.",
    "We {activity} on Saturday, it was lovely.",
    "I {activity} yesterday, honestly needed that.",
    "I'm making {food} for dinner tonight.",
    "Work has been a lot this week, but I'm hanging in there.",
    "That sounds nice, you deserve a rest.",
    "Ha, same here. I'm trying to get more sleep.",
    "I keep meaning to call my parents more often.",
    "Did you see the news about the storm? Crazy.",
    "Totally agree with you there.",
    "I know what you mean, it's been a strange few weeks.",
    "We should catch up properly soon.",
    "Anyway, how's everything on your end?",
    "Oh, I almost forgot to tell you something.",
    "I finally finished {show}, the ending was wild.",
    "My neighbour's music kept me up again last night.",
    "Traffic this morning was unbelievable.",
    "I'm trying to drink less coffee, it's going badly.",
    "The farmers market had amazing peaches this week.",
    "I spent way too long on my phone today.",
    "I've been trying to stretch every morning.",
    "We had a power cut for two hours, so dramatic.",
    "Honestly, I just want a holiday.",
    "Thanks for asking, it means a lot.",
    "Haha, that's so you.",
    "That reminds me, I need to book a dentist appointment.",
    "I can't believe how fast this year is going.",
    "I tried a new cafe near work, the cinnamon buns were great.",
    "My phone screen cracked again, ugh.",
    "I'm thinking of rearranging the living room.",
    "Sounds like a plan!",
    "Oh wow, I had no idea.",
    "I'll send you the link later.",
    "I'm so glad to hear that.",
    "We went to {place} for brunch, the pancakes were huge.",
    "It's finally warming up a bit.",
    "I need to stop buying books before I finish the ones I have.",
    "My sleep has been all over the place.",
    "I've started walking to work when it's dry.",
    "Our building's lift is broken again.",
)
# A question and the other peer's answer.
EXCHANGES = (
    ("Do you have any plans for the weekend?", "Not much planned, maybe a quiet one at home."),
    ("Any plans for the weekend?", "We {activity} last weekend, so this one will be quiet."),
    ("How are your family doing?", "They're good, busy as always."),
    ("How's your family?", "All well, my mum says hi!"),
    ("Have you watched anything good lately?", "We started {show}, it's pretty good so far."),
    ("What did you have for dinner?", "Just {food}, nothing fancy."),
    ("How was your weekend?", "Lovely, we {activity}."),
    ("How's the weather over there?", "It has been {weather} all week."),
    ("Did you sleep well?", "Not really, the neighbours had a party."),
    ("Seen any good films lately?", "Nothing great, I mostly rewatch old favourites."),
)
GREETINGS = (
    "Hey {other}! How has your week been?",
    "Hi! Long time no chat, how are things?",
    "Hey you! Got a minute to catch up?",
    "Hello {other}, hope you're doing well!",
    "Hi {other}! What's new?",
    "Morning! How are you doing?",
    "Hey! Sorry I went quiet, it's been a week.",
)
FAREWELLS = (
    "Talk soon, have a good evening!",
    "Take care, speak soon!",
    "Good luck with everything this week.",
    "Anyway, I should get going. Bye for now!",
    "Lovely chatting, catch you later!",
    "Let me know how it goes!",
)
PLACES = (
    "the new bakery",
    "the harbour market",
    "a diner on Main Street",
    "the botanical garden",
    "the old mill cafe",
    "the riverside park",
    "the science museum",
    "a rooftop bar",
)
REACTIONS = {
    "good": (
        "That's amazing, congratulations!",
        "Oh that's wonderful news!",
        "Love that for you!",
        "So happy for you, that's great.",
        "Wow, good for you!",
        "That's fantastic, well done!",
    ),
    "neutral": (
        "Oh nice, tell me more!",
        "Interesting! How's that going?",
        "That sounds fun.",
        "Oh cool!",
        "Ha, I can picture that.",
        "Nice, I didn't know that about you.",
    ),
    "bad": (
        "Oh no, I'm sorry to hear that.",
        "That sounds really stressful.",
        "Ugh, that's rough.",
        "Sending hugs, that sounds hard.",
        "Oh no! Hope things get better soon.",
    ),
}


# ---------------------------------------------------------------- planning facts


@dataclass
class _Statement:
    session: int
    speaker: str
    text: str
    key: str | None  # questions refer to it by key
    mood: str = "neutral"
    order: float = 0.5  # where in the session (0 start .. 1 end)


@dataclass
class _QuestionPlan:
    kind: str
    about: str
    text: str
    answer: str
    keys: tuple[str, ...]


@dataclass
class _Plan:
    rng: random.Random
    dates: list[datetime]
    statements: list[_Statement] = field(default_factory=list)
    questions: list[_QuestionPlan] = field(default_factory=list)
    used: dict[str, set] = field(default_factory=dict)
    keys: int = 0

    def session_in(self, low: float, high: float) -> int:
        """A session index in the fraction [low, high) of the conversation."""
        n = len(self.dates)
        return self.rng.randrange(min(n - 1, int(low * n)), max(min(n, int(high * n)), min(n - 1, int(low * n)) + 1))

    def pick(self, kind: str, values):
        """A value of `values` not yet used in this conversation for `kind` (both peers draw from the same pool)."""
        taken = self.used.setdefault(kind, set())
        free = [v for v in values if v not in taken] or list(values)
        value = self.rng.choice(free)
        taken.add(value)
        return value

    def say(self, session: int, speaker: str, text: str, mood: str = "neutral", order: float | None = None) -> str:
        self.keys += 1
        key = f"k{self.keys}"
        self.statements.append(
            _Statement(session, speaker, text, key, mood, self.rng.random() if order is None else order)
        )
        return key

    def ask(self, kind: str, about: str, templates, answer: str, *keys: str, **slots) -> None:
        text = self.rng.choice(templates).format(P=about, **slots)
        self.questions.append(_QuestionPlan(kind, about, text, answer, keys))


def _day(date: datetime) -> str:
    return f"{date.day} {MONTHS[date.month - 1]} {date.year}"


def _month(date: datetime) -> str:
    return f"{MONTHS[date.month - 1]} {date.year}"


def _relative(plan: _Plan, when: datetime) -> tuple[str, str]:
    """A relative phrase for an event shortly before `when`, and the answer's date for it (as LoCoMo words them)."""
    rng = plan.rng
    choice = rng.randrange(5)
    if choice == 0:
        return "yesterday", _day(when - timedelta(days=1))
    if choice == 1:  # the most recent such weekday, two to six days back
        day = when - timedelta(days=rng.randint(2, 6))
        return f"last {WEEKDAYS[day.weekday()]}", _day(day)
    if choice == 2:
        return "last weekend", f"the weekend before {_day(when)}"
    if choice == 3:
        return "a couple of weeks ago", f"two weeks before {_day(when)}"
    return "last month", _month(when.replace(day=1) - timedelta(days=1))


def _pet(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    kind, category = plan.pick("pet", PETS)
    name = plan.pick("pet_name", PET_NAMES)
    s = plan.session_in(0.0, 0.5)
    got = plan.say(
        s,
        me,
        rng.choice(
            (
                f"Big news: we adopted a {kind} from the shelter! We named {rng.choice(('him', 'her'))} {name}.",
                f"I finally did it, I brought home a little {kind}, my first {category}. "
                f"{name} is asleep on my feet right now.",
                f"Meet {name}, my new {kind}! I picked {rng.choice(('him', 'her'))} up from a rescue on Saturday.",
            )
        ),
        "good",
    )
    plan.ask(
        "single",
        me,
        (
            "What is the name of {P}'s {category}?",
            "What did {P} call the {category} they adopted?",
            "What's {P}'s pet called?",
        ),
        name,
        got,
        category=category,
    )
    plan.ask(
        "single",
        me,
        (
            "What kind of animal did {P} adopt?",
            "Which breed or species is {P}'s pet?",
            "What pet did {P} get from the rescue?",
        ),
        f"a {kind}",
        got,
    )
    trick = rng.choice(TRICKS[category])
    later = plan.session_in(0.5, 1.0)
    taught = plan.say(
        later,
        me,
        rng.choice(
            (
                f"{name} finally learned to {trick}! Took weeks of treats.",
                f"You won't believe it, {name} can {trick} now. So proud of the little one.",
                f"Training update: after a month of practice {name} will {trick} for a bit of cheese.",
                f"I taught {name} a new trick: {rng.choice(('he', 'she'))} can {trick}!",
            )
        ),
        "good",
    )
    plan.ask(
        "single",
        me,
        (
            "What trick did {P} teach their {category}?",
            "What can {P}'s {category} do now after all that training?",
            "What did {P}'s pet learn?",
        ),
        trick,
        taught,
        category=category,
    )
    plan.say(
        plan.session_in(0.2, 1.0),
        me,
        rng.choice(
            (
                f"The {category} chewed through my phone charger this morning, unbelievable.",
                "Had to take the little furball to the vet for a check-up, all fine though.",
                f"My pet has decided the sofa belongs to {rng.choice(('him', 'her'))} now.",
            )
        ),
        "neutral",
    )
    if rng.random() < 0.5:  # a second pet, later: "which pets" needs both turns
        second_kind, _ = plan.pick("pet", PETS)
        second_name = plan.pick("pet_name", PET_NAMES)
        more = plan.say(
            plan.session_in(0.55, 1.0),
            me,
            rng.choice(
                (
                    f"So... we got a second pet. A {second_kind} called {second_name}. The house is chaos.",
                    f"New family member alert: a {second_kind}! {second_name} is settling in slowly.",
                )
            ),
            "good",
        )
        plan.ask(
            "multi",
            me,
            ("What animals does {P} have at home?", "Which pets live with {P}?", "What are the names of {P}'s pets?"),
            f"a {kind} named {name} and a {second_kind} named {second_name}",
            got,
            more,
        )


def _home(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    first, second = plan.pick("city", CITIES), plan.pick("city", CITIES)
    s1 = plan.session_in(0.0, 0.3)
    lived = plan.say(
        s1,
        me,
        rng.choice(
            (
                f"I've lived in {first} for about six years now, it really feels like home.",
                f"{first} in the autumn is the best, I never get tired of this city.",
                f"Our flat in {first} is tiny but the neighbourhood is great.",
            )
        ),
        "neutral",
    )
    s2 = plan.session_in(0.45, 0.75)
    phrase, when = _relative(plan, plan.dates[s2])
    moved = plan.say(
        s2,
        me,
        rng.choice(
            (
                f"We moved to {second} {phrase}! Boxes everywhere, but we made it.",
                f"We live in {second} now, we moved {phrase} and I already love the city.",
                f"Writing from our new place in {second}, we did the move {phrase}.",
                f"Well, it's official: {phrase} we packed up and relocated to {second}.",
            )
        ),
        "good",
    )
    plan.say(
        plan.session_in(0.8, 1.0),
        me,
        rng.choice(
            (
                "Still getting lost in the new neighbourhood, but I found a great bakery.",
                "The commute from the new flat is so much shorter, I love it.",
                "I miss my old street sometimes, but this place is growing on me.",
            )
        ),
        "neutral",
    )
    plan.ask(
        "single",
        me,
        ("Where does {P} live now?", "Which city is {P} based in these days?", "What city did {P} relocate to?"),
        second,
        moved,
    )
    plan.ask("single", me, ("Where did {P} live before the move?", "Which city did {P} leave?"), first, lived)
    plan.ask(
        "multi",
        me,
        ("Which cities has {P} lived in?", "Name the places {P} has called home."),
        f"{first} and {second}",
        lived,
        moved,
    )
    plan.ask("temporal", me, ("When did {P} move to {city}?", "When did {P} relocate?"), when, moved, city=second)
    # after the move: something new there
    club, club_q = rng.choice(
        (
            ("a community choir", "group"),
            ("a running club", "club"),
            ("a volunteer group at the animal shelter", "group"),
            ("a book club", "club"),
        )
    )
    after = plan.say(
        min(len(plan.dates) - 1, s2 + rng.randint(1, 3)),
        me,
        rng.choice(
            (
                f"Since we got here I've joined {club}, met loads of people already.",
                f"Best thing about the new city so far: I signed up for {club}.",
            )
        ),
        "good",
    )
    plan.ask(
        "temporal",
        me,
        ("What did {P} join after moving to {city}?", "What {club_q} did {P} sign up for after relocating?"),
        club,
        after,
        city=second,
        club_q=club_q,
    )


def _job(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    (t1, w1, work1, _), (t2, w2, _, people2) = plan.pick("job", JOBS), plan.pick("job", JOBS)
    s1 = plan.session_in(0.0, 0.35)
    old = plan.say(
        s1,
        me,
        rng.choice(
            (
                f"I've been working as a {t1} at {w1} for three years now.",
                f"Long day at {w1}. Being a {t1} is rewarding but exhausting.",
                f"My job as a {t1} at {w1} keeps me busy, especially {work1}.",
            )
        ),
        "neutral",
    )
    plan.say(
        plan.session_in(0.1, 0.4),
        me,
        rng.choice(
            (
                f"Another week of {work1}, I'm running on fumes.",
                f"Work was brutal, {work1} all day.",
            )
        ),
        "bad",
    )
    s2 = plan.session_in(0.4, 0.8)
    month = MONTHS[(plan.dates[s2].month) % 12]
    new = plan.say(
        s2,
        me,
        rng.choice(
            (
                f"I handed in my notice! I'm starting as a {t2} at {w2} in {month}.",
                f"Got the offer to be a {t2} at {w2}. Time for a change, I start in {month}.",
                f"Decided to switch careers. From {month} I'll be a {t2} at {w2}.",
            )
        ),
        "good",
    )
    plan.say(
        min(len(plan.dates) - 1, s2 + rng.randint(1, 4)),
        me,
        rng.choice(
            (
                f"First weeks in the new role are going well, the {people2} are lovely.",
                f"New job is tiring but I'm learning a ton. Still figuring out the {people2}.",
            )
        ),
        "good",
    )
    plan.ask(
        "single",
        me,
        ("What does {P} do for work now?", "What is {P}'s current job?", "What's {P}'s new position?"),
        f"{t2} at {w2}",
        new,
    )
    plan.ask(
        "single",
        me,
        ("What was {P}'s job before the career change?", "What did {P} work as originally?"),
        f"{t1} at {w1}",
        old,
    )
    plan.ask("multi", me, ("What jobs has {P} had?", "Which roles has {P} worked in?"), f"{t1} and {t2}", old, new)
    plan.ask(
        "temporal",
        me,
        ("When does {P} start the new job?", "In which month did {P} begin working at {w2}?"),
        month,
        new,
        w2=w2,
    )


def _hobby(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    hobby, called, where = plan.pick("hobby", HOBBIES)
    said = plan.say(
        plan.session_in(0.0, 0.7),
        me,
        rng.choice(
            (
                f"I signed up for {hobby} at {where}, first session was so fun.",
                f"New obsession: {hobby}. I go to {where} twice a week now.",
                f"I've been getting into {hobby} lately, it really clears my head.",
                f"My new hobby is {hobby}, I'm hooked already.",
            )
        ),
        "good",
    )
    plan.ask(
        "single",
        me,
        (
            "What hobby did {P} take up?",
            "What does {P} do to unwind these days?",
            "What has {P} been getting into lately?",
            "Does {P} do {called}? What exactly?",
        ),
        hobby,
        said,
        called=called,
    )
    plan.say(
        plan.session_in(0.5, 1.0),
        me,
        rng.choice(
            (
                "My hands are so sore from the class, but worth it.",
                "I missed my class this week and I really felt it.",
                "The instructor said I'm improving, which made my day.",
            )
        ),
        "good",
    )


def _food(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    food = plan.pick("food", FOODS)
    said = plan.say(
        plan.session_in(0.0, 1.0),
        me,
        rng.choice(
            (
                f"If I could eat one thing forever it would be {food}.",
                f"My favourite food in the whole world? {food.capitalize()}, no contest.",
                f"Nothing beats a big bowl of {food} after a long day, it's my comfort food.",
                f"We found a place that does the best {food}, I've been three times this month.",
            )
        ),
        "good",
    )
    plan.ask(
        "single",
        me,
        (
            "What is {P}'s favourite food?",
            "What dish does {P} love most?",
            "What does {P} like to eat when they need cheering up?",
        ),
        food,
        said,
    )


def _allergy(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    thing, called = plan.pick("allergy", ALLERGIES)
    said = plan.say(
        plan.session_in(0.0, 1.0),
        me,
        rng.choice(
            (
                f"Ugh, I'm allergic to {thing} and had a reaction at the party.",
                f"Found out the hard way that {thing} and I don't get along. Itchy all night.",
                f"Had to leave early, my {thing} allergy flared up badly.",
                f"Reminder to self: always check for {thing}. Spent the evening with antihistamines.",
            )
        ),
        "bad",
    )
    plan.ask(
        "single",
        me,
        ("What is {P} allergic to?", "What gives {P} an allergic reaction?", "Which allergy does {P} have?"),
        thing,
        said,
    )


def _relative_fact(plan: _Plan, me: str, other: str, shared: str) -> None:
    """A relative of `me` whose first name (`shared`) the other peer's friend also has: a distractor by design."""
    rng = plan.rng
    relation = rng.choice(RELATIVES)
    title, place, _, _ = plan.pick("job", JOBS)
    said = plan.say(
        plan.session_in(0.0, 0.8),
        me,
        rng.choice(
            (
                f"My {relation} {shared} just got a job as a {title} at {place}!",
                f"{shared}, my {relation}, has been working as a {title} and loves it.",
            )
        ),
        "good",
    )
    plan.ask(
        "single",
        me,
        ("What does {P}'s {relation} {name} do?", "What is the job of {P}'s {relation}?"),
        title,
        said,
        relation=relation,
        name=shared,
    )


def _friend_fact(plan: _Plan, me: str, other: str, shared: str) -> None:
    rng = plan.rng
    country = plan.pick("country", COUNTRIES)
    said = plan.say(
        plan.session_in(0.2, 1.0),
        me,
        rng.choice(
            (
                f"My friend {shared} is backpacking through {country} and keeps sending me photos.",
                f"{shared} from my old school just emailed, {rng.choice(('she', 'he'))} moved to {country} for a year!",
            )
        ),
        "neutral",
    )
    plan.ask(
        "single",
        me,
        ("Where is {P}'s friend {name} travelling?", "Which country did {P}'s friend {name} go to?"),
        country,
        said,
        name=shared,
    )


def _namesake(plan: _Plan, me: str, other: str) -> None:
    """A coworker who has the other peer's name."""
    rng = plan.rng
    thing = rng.choice(
        (
            "brought homemade brownies to the office",
            "is leaving to start a bakery",
            "won the office quiz single-handedly",
            "got engaged on a hot air balloon",
        )
    )
    said = plan.say(
        plan.session_in(0.1, 1.0),
        me,
        rng.choice(
            (
                f"Funny, a coworker of mine is also called {other}, and {other} {thing}.",
                f"The other {other}, the one from my office, {thing}. Not you, haha.",
            )
        ),
        "neutral",
    )
    plan.ask(
        "single",
        me,
        ("What did {P}'s coworker {other} do?", "What's the news about the {other} who works with {P}?"),
        thing,
        said,
        other=other,
    )


def _trips(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    first, second = plan.pick("country", COUNTRIES), plan.pick("country", COUNTRIES)
    s1 = plan.session_in(0.0, 0.45)
    month = MONTHS[(plan.dates[s1].month + rng.randint(0, 2)) % 12]
    planned = plan.say(
        s1,
        me,
        rng.choice(
            (
                f"We booked flights! Going to {first} in {month}, I can't wait.",
                f"In {month} I'm finally doing the {first} trip I've talked about for years.",
            )
        ),
        "good",
    )
    back = plan.say(
        plan.session_in(0.5, 0.7),
        me,
        rng.choice(
            (
                f"Back home. {first} was incredible, the food alone was worth it.",
                f"I'm still jet-lagged from {first}, but what a trip.",
            )
        ),
        "good",
    )
    s3 = plan.session_in(0.75, 1.0)
    phrase, when = _relative(plan, plan.dates[s3])
    spur = plan.say(
        s3,
        me,
        rng.choice(
            (
                f"Spontaneous decision: we flew to {second} {phrase} for a long weekend.",
                f"Just got back from a quick getaway to {second}, we left {phrase}.",
            )
        ),
        "good",
    )
    plan.ask(
        "temporal",
        me,
        ("When was {P}'s trip to {country} planned for?", "Which month did {P} travel to {country}?"),
        month,
        planned,
        country=first,
    )
    plan.ask(
        "multi",
        me,
        ("Which countries has {P} visited this year?", "Where has {P} been on holiday?"),
        f"{first} and {second}",
        back,
        spur,
    )
    plan.ask("temporal", me, ("When did {P} go to {country}?",), when, spur, country=second)


def _race(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    race = rng.choice(RACES)
    s = plan.session_in(0.1, 1.0)
    phrase, when = _relative(plan, plan.dates[s])
    minutes = rng.randint(25, 130)
    said = plan.say(
        s,
        me,
        rng.choice(
            (
                f"I did the {race} {phrase}! Finished in {minutes} minutes, legs are dead.",
                f"Took part in the {race} {phrase}, my time was {minutes} minutes. Not bad for a first go.",
                f"{phrase.capitalize()} I completed the {race}. {minutes} minutes, a personal best.",
            )
        ),
        "good",
    )
    plan.ask("temporal", me, ("When did {P} do the {race}?", "When was {P}'s {race}?"), when, said, race=race)
    plan.ask(
        "single",
        me,
        ("How long did it take {P} to finish the {race}?", "What was {P}'s time in the race?"),
        f"{minutes} minutes",
        said,
        race=race,
    )


def _instruments(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    first, second = plan.pick("instrument", INSTRUMENTS), plan.pick("instrument", INSTRUMENTS)
    a = plan.say(
        plan.session_in(0.0, 0.5),
        me,
        rng.choice(
            (
                f"I've played the {first} since I was a kid, still practise most evenings.",
                f"Dusted off my old {first} and played for an hour, felt great.",
            )
        ),
        "good",
    )
    b = plan.say(
        plan.session_in(0.5, 1.0),
        me,
        rng.choice(
            (
                f"I started {second} lessons! My teacher is very patient with me.",
                f"Bought a second-hand {second}, learning it from videos.",
            )
        ),
        "good",
    )
    plan.ask(
        "multi",
        me,
        ("What instruments does {P} play?", "Which musical instruments can {P} play?"),
        f"{first} and {second}",
        a,
        b,
    )


def _book(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    book = plan.pick("book", BOOKS)
    said = plan.say(
        plan.session_in(0.0, 1.0),
        me,
        rng.choice(
            (
                f"I'm halfway through {book} and I can't put it down.",
                f"Reading {book} at the moment, the writing is gorgeous.",
                f"Just finished {book}, I cried at the end.",
            )
        ),
        "good",
    )
    plan.ask("single", me, ("What book has {P} been reading?", "Which novel did {P} mention?"), book, said)


def _car(plan: _Plan, me: str, other: str) -> None:
    rng = plan.rng
    car = plan.pick("car", CARS)
    s = plan.session_in(0.0, 1.0)
    phrase, when = _relative(plan, plan.dates[s])
    said = plan.say(
        s,
        me,
        rng.choice(
            (
                f"We bought {car} {phrase}, no more buses for me!",
                f"Our new car is {car}, we got it {phrase}. Road trip soon?",
                f"Picked up {car} from the dealer {phrase}. It's not new, but it's ours.",
            )
        ),
        "good",
    )
    plan.ask("single", me, ("What car did {P} buy?", "What vehicle does {P} drive now?"), car, said)
    plan.ask("temporal", me, ("When did {P} get the car?",), when, said)


FACTS = (_pet, _home, _job, _hobby, _food, _allergy, _trips, _race, _instruments, _book, _car, _namesake)


# ---------------------------------------------------------------- building conversations


def _filler(rng: random.Random, other: str, pool=FILLER) -> str:
    return rng.choice(pool).format(
        other=other,
        activity=rng.choice(ACTIVITIES),
        weather=rng.choice(WEATHER),
        show=rng.choice(SHOWS),
        food=rng.choice(FOODS),
        place=rng.choice(PLACES),
        activity_place=rng.choice(PLACES),
    )


def _conversation(index: int, seed: int, sessions_scale: float) -> Conversation:
    rng = random.Random(seed * 1_000 + index)
    a, b = rng.sample(NAMES, 2)
    count = max(4, round(rng.randint(15, 30) * sessions_scale))
    start = datetime(2023, rng.randint(1, 6), rng.randint(1, 28), rng.randint(8, 20), rng.choice((0, 15, 30, 45)))
    dates, when = [], start
    for _ in range(count):
        dates.append(when)
        when = when + timedelta(days=rng.randint(2, 12), hours=rng.randint(-3, 3), minutes=rng.randint(0, 59))
    plan = _Plan(rng, dates)
    shared = rng.choice(FRIEND_NAMES)  # a's relative and b's friend share this first name
    for me, other in ((a, b), (b, a)):
        kinds = list(FACTS)
        rng.shuffle(kinds)
        for fact in kinds[: rng.randint(9, len(kinds))]:
            fact(plan, me, other)
    _relative_fact(plan, a, b, shared)
    _friend_fact(plan, b, a, shared)

    by_session: dict[int, list[_Statement]] = {}
    for statement in plan.statements:
        by_session.setdefault(statement.session, []).append(statement)
    turns: list[Turn] = []
    sessions: list[tuple[str, str]] = []
    where: dict[str, str] = {}
    for s, date in enumerate(dates):
        session_id = f"session-{s + 1}"
        sessions.append((session_id, date.isoformat() + "+00:00"))
        facts = sorted(by_session.get(s, []), key=lambda st: st.order)
        fillers = max(4, rng.randint(12, 22) - 2 * len(facts))
        # a fact goes before filler turn number `cut`: after the greeting, before the farewell
        cuts = sorted(rng.randint(1, fillers - 1) for _ in facts)
        speaker, turn_no = rng.choice((a, b)), 0

        def emit(who: str, text: str) -> Turn:  # called in this iteration only (B023: it may read its variables)
            nonlocal turn_no
            turn_no += 1
            stamp = date + timedelta(minutes=2 * turn_no, seconds=rng.randint(0, 59))  # noqa: B023
            turn = Turn(f"D{s + 1}:{turn_no}", session_id, who, text, stamp.isoformat() + "+00:00")  # noqa: B023
            turns.append(turn)
            return turn

        for i in range(fillers + 1):
            while facts and cuts[0] == i:
                statement, _ = facts.pop(0), cuts.pop(0)
                listener = b if statement.speaker == a else a
                where[statement.key] = emit(statement.speaker, statement.text).id
                emit(listener, rng.choice(REACTIONS[statement.mood]))  # the other peer reacts
                speaker = statement.speaker if rng.random() < 0.5 else listener
            if i < fillers:
                listener = b if speaker == a else a
                if 0 < i < fillers - 1 and rng.random() < 0.25:  # a question and its answer
                    ask, reply = rng.choice(EXCHANGES)
                    emit(speaker, _filler(rng, listener, (ask,)))
                    emit(listener, _filler(rng, speaker, (reply,)))
                    speaker = speaker if rng.random() < 0.85 else listener
                    continue
                pool = GREETINGS if i == 0 else FAREWELLS if i == fillers - 1 else FILLER
                emit(speaker, _filler(rng, listener, pool))
                speaker = listener if rng.random() < 0.85 else speaker
    questions = []
    for n, q in enumerate(plan.questions, start=1):
        questions.append(
            Question(f"c{index + 1}-q{n}", q.kind, q.about, q.text, q.answer, tuple(where[k] for k in q.keys))
        )
    rng.shuffle(questions)
    return Conversation(f"conv-{index + 1}", (a, b), sessions, turns, questions)


def generate(count: int = 8, seed: int = 23, sessions_scale: float = 1.0) -> list[Conversation]:
    """`count` conversations from `seed`; `sessions_scale` scales the number of sessions (at least 4)."""
    return [_conversation(i, seed, sessions_scale) for i in range(count)]
