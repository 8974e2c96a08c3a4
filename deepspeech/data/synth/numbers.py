"""Numbers, dates, times and durations written out as English words.

The synthetic transcripts hold only letters, spaces and apostrophes, and espeak
is fed the very same text, so every number is spelled the way it is spoken:
``1984`` -> "nineteen eighty four", ``7:05`` -> "seven oh five". American style,
without "and" inside numbers ("three hundred twelve").
"""

from __future__ import annotations

ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
SCALES = ((1_000_000_000, "billion"), (1_000_000, "million"), (1_000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}
MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _below_thousand(n: int) -> list[str]:
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(TENS[tens])
        if ones:
            words.append(ONES[ones])
    elif rest or not words:
        words.append(ONES[rest])
    return words


def cardinal(n: int) -> str:
    """``342`` -> "three hundred forty two"; 0 <= n < 10**12."""
    if not 0 <= n < 10**12:
        raise ValueError(f"cannot spell {n}: only 0 <= n < 10**12")
    if n < 1000:
        return " ".join(_below_thousand(n))
    words: list[str] = []
    for value, name in SCALES:
        if n >= value:
            count, n = divmod(n, value)
            words += _below_thousand(count) + [name]
    if n:
        words += _below_thousand(n)
    return " ".join(words)


def ordinal(n: int) -> str:
    """``21`` -> "twenty first", ``40`` -> "fortieth"."""
    words = cardinal(n).split()
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def digits(text: str) -> str:
    """``"4071"`` -> "four zero seven one": codes and phone numbers, digit by digit."""
    return " ".join(ONES[int(ch)] for ch in text)


def year(y: int) -> str:
    """``1984`` -> "nineteen eighty four", ``2005`` -> "two thousand five", ``2023`` -> "twenty
    twenty three", ``1900`` -> "nineteen hundred", ``1807`` -> "eighteen oh seven"."""
    if 2000 <= y < 2010:
        return cardinal(y)
    century, rest = divmod(y, 100)
    if y < 1000 or century % 10 == 0 and rest == 0:
        return cardinal(y)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    if rest < 10:
        return f"{cardinal(century)} oh {ONES[rest]}"
    return f"{cardinal(century)} {cardinal(rest)}"


def clock(hour: int, minute: int, style: str = "digital") -> str:
    """A time of day as people say it.

    ``style`` "digital": "seven oh five", "seven o'clock", "twelve thirty";
    "past": "five past seven", "half past seven", "a quarter to eight",
    "twenty minutes to eight"; "noon" and "midnight" come from either style.
    """
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise ValueError(f"not a time of day: {hour}:{minute:02d}")
    if minute == 0 and hour in (0, 12):
        return "midnight" if hour == 0 else "noon"
    h12 = hour % 12 or 12
    if style == "digital":
        if minute == 0:
            return f"{cardinal(h12)} o'clock"
        if minute < 10:
            return f"{cardinal(h12)} oh {ONES[minute]}"
        return f"{cardinal(h12)} {cardinal(minute)}"
    if style != "past":
        raise ValueError(f"unknown clock style {style!r}")
    next_h12 = (hour + 1) % 12 or 12
    if minute == 0:
        return f"{cardinal(h12)} o'clock"
    if minute == 15:
        return f"a quarter past {cardinal(h12)}"
    if minute == 30:
        return f"half past {cardinal(h12)}"
    if minute == 45:
        return f"a quarter to {cardinal(next_h12)}"
    if minute < 30:
        unit = "" if minute % 5 == 0 else (" minute" if minute == 1 else " minutes")
        return f"{cardinal(minute)}{unit} past {cardinal(h12)}"
    left = 60 - minute
    unit = "" if left % 5 == 0 else (" minute" if left == 1 else " minutes")
    return f"{cardinal(left)}{unit} to {cardinal(next_h12)}"


def part_of_day(hour: int) -> str:
    """The phrase that disambiguates a twelve-hour time: "in the morning", "at night"."""
    if 3 <= hour < 12:
        return "in the morning"
    if 12 <= hour < 17:
        return "in the afternoon"
    if 17 <= hour < 21:
        return "in the evening"
    return "at night"


def date(month: int, day: int, style: str = "month_day") -> str:
    """``(3, 21)`` -> "march twenty first" ("month_day") or "the twenty first of march" ("of")."""
    if not (1 <= month <= 12 and 1 <= day <= DAYS_IN_MONTH[month - 1]):
        raise ValueError(f"not a date: month {month} day {day}")
    if style == "month_day":
        return f"{MONTHS[month - 1]} {ordinal(day)}"
    if style == "of":
        return f"the {ordinal(day)} of {MONTHS[month - 1]}"
    raise ValueError(f"unknown date style {style!r}")


def duration(hours: int = 0, minutes: int = 0, seconds: int = 0) -> str:
    """``(1, 30)`` -> "one hour and thirty minutes"; zero parts are left out."""
    parts = []
    for value, unit in ((hours, "hour"), (minutes, "minute"), (seconds, "second")):
        if value:
            parts.append(f"{cardinal(value)} {unit}{'' if value == 1 else 's'}")
    if not parts:
        return "zero seconds"
    return parts[0] if len(parts) == 1 else " ".join(parts[:-1]) + " and " + parts[-1]


def money(dollars: int, cents: int = 0) -> str:
    """``(12, 50)`` -> "twelve dollars and fifty cents"."""
    parts = []
    if dollars or not cents:
        parts.append(f"{cardinal(dollars)} dollar{'' if dollars == 1 else 's'}")
    if cents:
        parts.append(f"{cardinal(cents)} cent{'' if cents == 1 else 's'}")
    return " and ".join(parts)
