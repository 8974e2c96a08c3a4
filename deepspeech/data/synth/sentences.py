"""English sentences for the synthetic corpus: templates filled from ``words.txt``.

Each call draws one kind of sentence (statements, questions, smart-home
commands, quantities, prices, dates, times ...) and fills its slots from the
word list, with numbers, dates and times spelled out as words. The result is
already in the default English vocabulary (lowercase a-z, space, apostrophe),
and it is exactly the text espeak reads, so audio and transcript agree.

Everything is drawn from a ``random.Random`` through ``rng.random()`` only, so
the sentences for a seed do not depend on the library's sampling helpers.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from deepspeech.data.synth import numbers as num
from deepspeech.data.synth.lexicon import article, load_sections, past, plural, third_person

MIN_WORDS = 6  # about two seconds at 130-200 words per minute
MAX_WORDS = 22  # about eight seconds

_GENRES = ("jazz", "rock", "classical", "pop", "country", "blues", "folk", "soul", "piano")
_STYLES = ("digital", "past")
_DOORS = ("front door", "back door", "garage door", "windows", "gate", "blinds")


class _Draw:
    """Slot fillers over one random stream."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = load_sections()

    # -- primitives on rng.random() only
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def integer(self, low: int, high: int) -> int:
        return low + min(int(self.rng.random() * (high - low + 1)), high - low)

    def choice(self, options):
        return options[self.integer(0, len(options) - 1)]

    def pick(self, *makers: Callable[[], str]) -> str:
        """Call one of ``makers``: only the chosen template draws its slots."""
        return self.choice(makers)()

    def small(self) -> int:
        """A count, small ones more likely: 2-12 mostly, up to 99."""
        return self.integer(2, 12) if self.chance(0.7) else self.integer(13, 99)

    # -- words
    def word(self, section: str) -> str:
        return self.words[section].draw(self.rng).word

    def noun_entry(self, section: str = "noun"):
        return self.words[section].draw(self.rng)

    def nouns(self, section: str = "noun") -> str:
        entry = self.noun_entry(section)
        return entry.form or plural(entry.word)

    def thing_section(self) -> str:
        return self.choice(("noun", "noun", "noun", "food", "animal"))

    def adjective(self) -> str:
        return self.word("color") if self.chance(0.15) else self.word("adjective")

    def verb(self, form: str = "base", section: str = "vt") -> str:
        entry = self.words[section].draw(self.rng)
        if form == "past":
            return entry.form or past(entry.word)
        if form == "third":
            return third_person(entry.word)
        return entry.word

    # -- phrases
    def object(self) -> str:
        """A noun phrase: "the old book", "an apple", "my keys", "three red chairs"."""
        section = self.thing_section()
        adjective = self.adjective() + " " if self.chance(0.35) else ""
        roll = self.rng.random()
        if roll < 0.35:
            return f"the {adjective}{self.noun_entry(section).word}"
        if roll < 0.55:
            phrase = adjective + self.noun_entry(section).word
            return f"{article(phrase)} {phrase}"
        if roll < 0.7:
            owner = self.choice(("my", "your", "his", "her", "our", "their"))
            return f"{owner} {adjective}{self.noun_entry(section).word}"
        if roll < 0.8:
            return f"{self.choice(('this', 'that'))} {adjective}{self.noun_entry(section).word}"
        if roll < 0.9:
            return f"some {adjective}{self.nouns(section)}"
        return f"{num.cardinal(self.small())} {adjective}{self.nouns(section)}"

    def subject(self) -> tuple[str, bool]:
        """A subject and whether it takes the third person singular ("she reads")."""
        roll = self.rng.random()
        if roll < 0.3:
            pronoun = self.choice(("i", "you", "we", "they", "he", "she"))
            return pronoun, pronoun in ("he", "she")
        if roll < 0.55:
            return self.word("name"), True
        if roll < 0.85:
            owner = self.choice(("my", "the", "our", "your", "her", "his"))
            return f"{owner} {self.word('person')}", True
        if roll < 0.92:
            return f"{self.word('name')} and {self.word('name')}", False
        return f"the {self.nouns('person')}", False

    def place(self) -> str:
        preposition = self.choice(("in", "at", "near", "behind", "next to", "across from"))
        return f"{preposition} the {self.word('place')}"

    def location(self) -> str:
        if self.chance(0.5):
            return self.place()
        where = self.choice(("on", "under", "behind", "next to", "inside", "near"))
        return f"{where} the {self.word('noun')}"

    def weekday(self) -> str:
        return self.choice(num.WEEKDAYS)

    def time_of_day(self) -> str:
        hour, minute = self.integer(0, 23), self.choice((0, 0, 5, 10, 15, 20, 30, 40, 45, 50))
        if self.chance(0.3):
            minute = self.integer(0, 59)
        style = "past" if self.chance(0.3) else "digital"
        spoken = num.clock(hour, minute, style)
        if spoken not in ("noon", "midnight") and self.chance(0.5):
            spoken += " " + num.part_of_day(hour)
        return spoken

    def when_past(self) -> str:
        return self.pick(
            lambda: self.choice(("yesterday", "last night", "this morning", "last week",
                                 "last year", "a long time ago", "earlier today")),
            lambda: f"{self.choice(('last', 'on'))} {self.weekday()}",
            lambda: f"in {self.choice(num.MONTHS)}",
            lambda: f"{num.cardinal(self.integer(2, 12))} days ago",
            lambda: f"in {num.year(self.integer(1950, 2024))}",
        )

    def when_future(self) -> str:
        return self.pick(
            lambda: self.choice(("tomorrow", "tonight", "next week", "later today", "next month",
                                 "after lunch", "before dinner", "this weekend",
                                 "tomorrow morning")),
            lambda: f"{self.choice(('next', 'on'))} {self.weekday()}",
            lambda: f"at {self.time_of_day()}",
            lambda: f"in {num.duration(minutes=self.choice((5, 10, 15, 20, 30, 45)))}",
        )

    def habitually(self) -> str:
        return self.pick(
            lambda: self.choice(("every day", "every morning", "on weekends", "twice a week",
                                 "at night", "after school", "in the evening",
                                 "once a month")),
            lambda: f"every {self.weekday()}",
            lambda: f"at {self.time_of_day()}",
            lambda: self.word("adverb"),
        )

    def date(self) -> str:
        month = self.integer(1, 12)
        day = self.integer(1, num.DAYS_IN_MONTH[month - 1] - (month == 2))
        spoken = num.date(month, day, "of" if self.chance(0.4) else "month_day")
        if self.chance(0.25):
            spoken = f"{self.weekday()} {spoken}"
        return spoken

    def clock(self, hours: tuple[int, int] = (0, 23), minutes: tuple[int, ...] = (0, 30)) -> str:
        return num.clock(self.integer(*hours), self.choice(minutes))

    def count(self, low: int, high: int) -> str:
        return num.cardinal(self.integer(low, high))


# -- sentence kinds ----------------------------------------------------------------


def _present(d: _Draw) -> str:
    subject, third = d.subject()
    verb = d.verb("third" if third else "base")
    tail = d.pick(d.habitually, d.location, lambda: "")
    return f"{subject} {verb} {d.object()} {tail}"


def _past(d: _Draw) -> str:
    subject, _ = d.subject()
    sentence = f"{subject} {d.verb('past')} {d.object()}"
    if d.chance(0.5):
        return f"{sentence} {d.when_past()}"
    return f"{sentence} {d.location()}" if d.chance(0.5) else f"{d.when_past()} {sentence}"


def _future(d: _Draw) -> str:
    subject, third = d.subject()
    if d.chance(0.5):
        aux = "will"
    else:
        be = "am" if subject == "i" else ("is" if third else "are")
        aux = f"{be} going to"
    return f"{subject} {aux} {d.verb()} {d.object()} {d.when_future()}"


def _intransitive(d: _Draw) -> str:
    subject, _ = d.subject()
    tail = d.pick(d.place, d.when_past, lambda: d.word("adverb"))
    return f"{subject} {d.verb('past', 'vi')} {tail}"


def _description(d: _Draw) -> str:
    noun = d.noun_entry(d.thing_section())
    roll = d.rng.random()
    if roll < 0.35:
        copula = d.choice(("is", "was", "looks", "seems", "is not", "isn't", "wasn't"))
        degree = d.choice(("", "", "very ", "really ", "quite ", "too ", "so "))
        more = f" and {d.adjective()}" if d.chance(0.3) else ""
        return f"the {noun.word} {d.location()} {copula} {degree}{d.adjective()}{more}"
    if roll < 0.6:
        phrase = f"{d.adjective()} {noun.word}"
        return f"there is {article(phrase)} {phrase} {d.location()}"
    if roll < 0.8:
        nouns = noun.form or plural(noun.word)
        return f"there are {num.cardinal(d.small())} {nouns} {d.location()}"
    phrase = f"{d.choice(('', 'very ', 'really ', 'rather '))}{d.adjective()} {noun.word}"
    return f"{d.choice(('that is', 'this is', 'it was', 'what'))} {article(phrase)} {phrase}"


def _question(d: _Draw) -> str:
    subject, third = d.subject()
    return d.pick(
        lambda: f"did you {d.verb()} {d.object()} {d.when_past()}",
        lambda: f"where did {subject} put the {d.word('noun')}",
        lambda: f"can you {d.verb()} {d.object()} for me",
        lambda: f"why did {subject} {d.verb()} {d.object()}",
        lambda: f"how many {d.nouns(d.thing_section())} do we need for the {d.word('noun')}",
        lambda: f"what time does the {d.word('place')} {d.choice(('open', 'close'))} "
                f"{d.when_future()}",
        lambda: f"{'does' if third else 'do'} {subject} want to {d.verb()} {d.object()}",
        lambda: f"have you seen my {d.word('noun')} {d.location()}",
        lambda: f"is the {d.word('noun')} {d.location()} {d.adjective()}",
        lambda: f"who is going to {d.verb()} {d.object()} {d.when_future()}",
        lambda: f"how long does it take to get to the {d.word('place')}",
    )


def _command(d: _Draw) -> str:
    room, device = d.word("room"), d.word("device")
    on_off = d.choice(("on", "off"))
    return d.pick(
        lambda: f"turn {on_off} the {device} in the {room}",
        lambda: f"turn the {device} {on_off} in the {room}",
        lambda: f"please switch {on_off} the {device} in the {room}",
        lambda: f"set a timer for {num.duration(minutes=d.integer(1, 59))}",
        lambda: f"set a timer for {num.duration(d.integer(1, 3), d.choice((0, 15, 30, 45)))}",
        lambda: f"set an alarm for {d.time_of_day()}",
        lambda: f"wake me up at {d.time_of_day()} {d.when_future()}",
        lambda: f"remind me to {d.verb()} {d.object()} {d.when_future()}",
        lambda: f"play some {d.choice(_GENRES)} music in the {room}",
        lambda: f"turn the volume {d.choice(('up', 'down'))} in the {room}",
        lambda: f"set the volume to {d.count(1, 10)}",
        lambda: f"set the temperature in the {room} to {d.count(60, 80)} degrees",
        lambda: f"dim the lights in the {room} to "
                f"{num.cardinal(d.choice((10, 20, 25, 30, 40, 50, 75)))} percent",
        lambda: f"make it {d.choice(('warmer', 'cooler', 'brighter', 'darker'))} in the {room}",
        lambda: f"call {d.word('name')} {d.when_future()}",
        lambda: f"call my {d.word('person')} and tell them i'm "
                f"{d.choice(('late', 'on my way', 'home'))}",
        lambda: f"send a message to {d.word('name')} saying i will be there at "
                f"{d.time_of_day()}",
        lambda: f"what's the weather like {d.when_future()}",
        lambda: f"will it {d.choice(('rain', 'snow', 'be windy', 'be sunny'))} "
                f"{d.when_future()}",
        lambda: f"add {d.nouns('food')} and {d.nouns('food')} to my shopping list",
        lambda: f"{d.choice(('open', 'close', 'lock', 'unlock'))} the {d.choice(_DOORS)} "
                f"{d.when_future()}",
        lambda: f"navigate to the nearest {d.word('place')} please",
        lambda: f"find {article(d.word('place'))} {d.word('place')} near the {d.word('place')}",
        lambda: f"what's on my calendar for {d.weekday()} "
                f"{d.choice(('morning', 'afternoon', 'evening'))}",
        lambda: f"schedule a meeting with {d.word('name')} on {d.weekday()} at "
                f"{d.time_of_day()}",
        lambda: f"start the {device} in the {room} {d.when_future()}",
        lambda: f"show me pictures of {d.nouns('animal')} and {d.nouns('animal')}",
    )


def _quantity(d: _Draw) -> str:
    n, m = d.integer(0, 20), d.integer(0, 20)
    return d.pick(
        lambda: f"i need {num.cardinal(d.small())} {d.nouns(d.thing_section())} for the "
                f"{d.word('noun')}",
        lambda: f"there were {d.count(10, 999)} people at the {d.word('place')}",
        lambda: f"the {d.word('noun')} costs "
                f"{num.money(d.integer(1, 999), d.choice((0, 0, 25, 50, 99, d.integer(1, 99))))}",
        lambda: f"that will be {num.money(d.integer(1, 99), d.integer(0, 99))} please",
        lambda: f"my phone number is {num.digits(str(d.integer(2000000, 9999999)))}",
        lambda: f"the code for the {d.word('noun')} is {num.digits(str(d.integer(1000, 999999)))}",
        lambda: f"please turn to page {d.count(1, 500)}",
        lambda: f"take bus number {d.count(1, 120)} to the {d.word('place')}",
        lambda: f"flight {d.count(100, 9999)} to "
                f"{d.choice(('boston', 'london', 'denver', 'paris', 'chicago', 'dallas'))} "
                "is delayed",
        lambda: f"it is {d.count(0, 105)} degrees outside {d.when_future()}",
        lambda: f"the battery is at {d.count(1, 100)} percent",
        lambda: f"the final score was {d.count(0, 9)} to {d.count(0, 9)}",
        lambda: f"about {num.cardinal(d.integer(1, 999) * d.choice((1000, 10000, 1000000)))} "
                "people live in that city",
        lambda: f"{num.cardinal(n)} plus {num.cardinal(m)} is {num.cardinal(n + m)}",
        lambda: f"{num.cardinal(n)} times {num.cardinal(m)} equals {num.cardinal(n * m)}",
        lambda: f"my {d.word('person')} lives on the {num.ordinal(d.integer(1, 40))} floor",
        lambda: f"{d.word('name')} is {d.count(2, 99)} years old "
                f"{d.choice(('today', 'now', 'this year'))}",
        lambda: f"the {d.word('noun')} is {d.count(2, 300)} "
                f"{d.choice(('meters', 'feet', 'inches', 'miles'))} "
                f"{d.choice(('long', 'wide', 'tall', 'away'))}",
        lambda: f"we drove {d.count(5, 900)} miles {d.when_past()}",
        lambda: f"room {d.count(100, 999)} is on the {num.ordinal(d.integer(1, 9))} floor",
    )


def _calendar(d: _Draw) -> str:
    event = d.choice(("meeting", "party", "concert", "exam", "wedding", "game"))
    return d.pick(
        lambda: f"today is {d.date()}",
        lambda: f"my birthday is on {d.date()}",
        lambda: f"the {event} is on {d.date()}",
        lambda: f"{d.word('name')} was born on {d.date()} {num.year(d.integer(1930, 2024))}",
        lambda: f"we moved to this {d.choice(('city', 'house', 'town'))} in "
                f"{d.choice(num.MONTHS)} {num.year(d.integer(1970, 2024))}",
        lambda: f"the {d.word('place')} was built in {num.year(d.integer(1700, 2024))}",
        lambda: f"the deadline for the {d.word('noun')} is {d.date()}",
        lambda: f"{d.word('name')} arrives on {d.weekday()} the {num.ordinal(d.integer(1, 31))}",
        lambda: f"can we move the {event} to {d.date()}",
        lambda: f"the store is closed from {d.date()} to {d.date()}",
    )


def _clock(d: _Draw) -> str:
    return d.pick(
        lambda: f"the train leaves at {d.time_of_day()}",
        lambda: f"let's meet at the {d.word('place')} at {d.time_of_day()}",
        lambda: f"it's {num.clock(d.integer(0, 23), d.integer(0, 59), d.choice(_STYLES))} now",
        lambda: f"dinner is at {d.time_of_day()} {d.when_future()}",
        lambda: f"the {d.word('place')} opens at {d.clock((6, 11))} and closes at "
                f"{d.clock((17, 23))}",
        lambda: f"i woke up at {num.clock(d.integer(4, 10), d.integer(0, 59))} {d.when_past()}",
        lambda: f"the movie starts at {d.time_of_day()}",
        lambda: f"please call me back at {d.time_of_day()}",
        lambda: f"the bus comes every {num.duration(minutes=d.choice((10, 15, 20, 30)))}",
        lambda: f"it takes {num.duration(d.choice((0, 0, 1, 2)), d.choice((5, 10, 20, 30, 45)))}"
                f" to walk to the {d.word('place')}",
    )


def _conversation(d: _Draw) -> str:
    return d.pick(
        lambda: f"i don't think the {d.word('noun')} is {d.adjective()}",
        lambda: f"let's {d.verb()} {d.object()} {d.when_future()}",
        lambda: f"it's {d.choice(('really', 'very', 'so', 'a bit'))} {d.adjective()} "
                f"{d.choice(('outside', 'in here', 'today'))}",
        lambda: f"we're going to the {d.word('place')} {d.when_future()}",
        lambda: f"i can't find {d.object()} anywhere",
        lambda: f"you're {d.choice(('right', 'wrong', 'late', 'early'))} about the "
                f"{d.word('noun')}",
        lambda: f"they've already {d.verb('past')} {d.object()}",
        lambda: f"i'd like {d.object()} and {d.object()} please",
        lambda: f"what's wrong with the {d.word('noun')} {d.location()}",
        lambda: f"i'm not sure where {d.word('name')} {d.verb('past', 'vi')}",
        lambda: f"thank you for {d.choice(('the', 'your'))} {d.adjective()} {d.word('noun')}",
        lambda: f"don't forget to {d.verb()} {d.object()} {d.when_future()}",
    )


def _compound(d: _Draw) -> str:
    first = d.choice((_past, _intransitive, _present))(d)
    second = d.choice((_past, _intransitive, _description))(d)
    return f"{first} {d.choice(('and', 'but', 'because', 'so', 'while'))} {second}"


KINDS: tuple[tuple[Callable[[_Draw], str], float], ...] = (
    (_present, 10), (_past, 10), (_future, 6), (_intransitive, 6), (_description, 8),
    (_question, 9), (_command, 14), (_quantity, 9), (_calendar, 6), (_clock, 7),
    (_conversation, 8), (_compound, 7),
)


def english_sentence(rng: random.Random) -> str:
    """One normalized transcript of MIN_WORDS..MAX_WORDS words (short ones are joined)."""
    draw = _Draw(rng)
    total = sum(weight for _, weight in KINDS)
    words: list[str] = []
    while len(words) < MIN_WORDS:
        point, kind = rng.random() * total, KINDS[-1][0]
        for candidate, weight in KINDS:
            point -= weight
            if point < 0:
                kind = candidate
                break
        more = kind(draw).split()
        if len(words) + len(more) + 1 > MAX_WORDS:
            continue
        words += (["and"] if words else []) + more
    return " ".join(words)
