"""Mandarin sentences for ``--language cmn``: templates over ``words_cmn.txt``.

Numbers, dates, times and prices are written in Chinese characters the way they
are read (两点半, 二零二四年三月五号), so the transcript is what espeak's ``cmn``
voice says. Transcripts hold Chinese characters only, without spaces or
punctuation; the Chinese vocabulary is built from the training transcripts.
"""

from __future__ import annotations

import functools
import random
from importlib import resources

MIN_CHARACTERS = 6  # about two seconds at 130-200 "words" per minute
MAX_CHARACTERS = 24  # about eight seconds
DIGITS = "零一二三四五六七八九"
WEEKDAYS = ("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期天")


def cardinal(n: int) -> str:
    """``15`` -> 十五, ``205`` -> 二百零五, ``12000`` -> 一万二千; 0 <= n < 10**8."""
    if not 0 <= n < 10**8:
        raise ValueError(f"cannot write {n}: only 0 <= n < 10**8")
    if n < 10:
        return DIGITS[n]
    if n < 20:
        return "十" + (DIGITS[n - 10] if n > 10 else "")
    high, low = divmod(n, 10_000)
    if high:
        rest = "" if low == 0 else ("零" if low < 1000 else "") + _below_10000(low)
        text = _below_10000(high) + "万" + rest
    else:
        text = _below_10000(n)
    return text[1:] if text.startswith("一十") else text  # 十二万, not 一十二万


def _below_10000(n: int) -> str:
    text, zero = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        digit, n = divmod(n, value)
        if digit:
            text += ("零" if zero and text else "") + DIGITS[digit] + unit
            zero = False
        else:
            zero = True
    return text


def count(n: int) -> str:
    """A number before a measure word: 两 instead of 二 (两个, 十二个, 两百个)."""
    text = cardinal(n)
    if n == 2 or text.startswith(("二百", "二千", "二万")):
        return "两" + text[1:]
    return text


def digits(text: str) -> str:
    """Phone numbers and years, digit by digit: ``2024`` -> 二零二四."""
    return "".join(DIGITS[int(ch)] for ch in text)


def clock(hour: int, minute: int) -> str:
    """``(14, 30)`` -> 下午两点半, ``(8, 5)`` -> 早上八点零五分."""
    part = ("凌晨" if hour < 5 else "早上" if hour < 9 else "上午" if hour < 12
            else "中午" if hour < 13 else "下午" if hour < 18 else "晚上")
    h12 = hour % 12 or 12
    spoken = part + ("两" if h12 == 2 else cardinal(h12)) + "点"
    if minute == 30:
        return spoken + "半"
    if minute:
        spoken += ("零" if minute < 10 else "") + cardinal(minute) + "分"
    return spoken


@functools.cache
def load_words() -> dict[str, list[tuple[str, str]]]:
    """``words_cmn.txt`` by section: (word, measure word or "")."""
    text = resources.files(__package__).joinpath("words_cmn.txt").read_text(encoding="utf-8")
    sections: dict[str, list[tuple[str, str]]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            sections[section] = []
        elif section is not None:
            word, _, measure = line.partition(" ")
            sections[section].append((word, measure.strip()))
    return sections


class _Draw:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = load_words()

    def integer(self, low: int, high: int) -> int:
        return low + min(int(self.rng.random() * (high - low + 1)), high - low)

    def choice(self, options):
        return options[self.integer(0, len(options) - 1)]

    def entry(self, section: str) -> tuple[str, str]:
        # earlier entries more often: the minimum of two uniform draws
        last = len(self.words[section]) - 1
        return self.words[section][min(self.integer(0, last), self.integer(0, last))]

    def word(self, section: str) -> str:
        return self.entry(section)[0]

    def counted(self, section: str) -> str:
        """A number, the word's measure word and the word: 三本书."""
        word, measure = self.entry(section)
        number = self.integer(1, 12) if self.rng.random() < 0.8 else self.integer(13, 99)
        return count(number) + (measure or "个") + word

    def time(self) -> str:
        return clock(self.integer(0, 23), self.choice((0, 0, 15, 30, 30, 45, self.integer(1, 59))))

    def date(self) -> str:
        month = self.integer(1, 12)
        return f"{cardinal(month)}月{cardinal(self.integer(1, 28))}{self.choice(('号', '日'))}"


def _sentence(d: _Draw) -> str:
    person, place, when = d.word("person"), d.word("place"), d.word("when")
    return d.choice((
        lambda: f"{person}{when}想去{place}",
        lambda: f"{person}在{place}{d.word('verb_object')}",
        lambda: f"请把{d.word('room')}的{d.word('device')}{d.choice(('打开', '关掉', '关上'))}",
        lambda: f"{when}天气{d.word('weather')}",
        lambda: f"{when}我们一起去{place}{d.word('verb_object')}吧",
        lambda: f"这个{d.word('thing')}{cardinal(d.integer(2, 999))}块钱",
        lambda: f"{person}有{d.counted(d.choice(('thing', 'animal', 'food')))}",
        lambda: f"今天是{d.date()}{d.choice(WEEKDAYS)}",
        lambda: f"现在是{d.time()}",
        lambda: f"火车{d.time()}出发",
        lambda: f"{person}喜欢{d.word('food')}吗",
        lambda: f"{person}的电话号码是{digits(str(d.integer(1300000000, 1899999999)))}",
        lambda: f"{person}今年{cardinal(d.integer(3, 90))}岁",
        lambda: f"明天{d.time()}叫我起床",
        lambda: f"帮我设一个{cardinal(d.integer(1, 60))}分钟的定时器",
        lambda: f"{person}{when}在{place}看见了{d.counted('animal')}",
        lambda: f"{person}觉得这个{d.word('thing')}很{d.word('adjective')}",
        lambda: f"你知道{place}在哪儿吗",
        lambda: f"{person}每天{d.time()}{d.word('verb_object')}",
        lambda: f"我想{d.word('verb_thing')}{d.counted('thing')}",
        lambda: f"{person}{digits(str(d.integer(1950, 2024)))}年{d.date()}去了{place}",
        lambda: f"{d.word('room')}里有{d.counted('thing')}",
        lambda: f"{cardinal(d.integer(1, 20))}加{cardinal(d.integer(1, 20))}等于多少",
        lambda: f"我们{d.date()}在{place}见面",
        lambda: f"{place}离这儿很{d.choice(('远', '近'))}",
    ))()


def mandarin_sentence(rng: random.Random) -> str:
    """One transcript of 6-24 characters (short ones are joined)."""
    draw = _Draw(rng)
    text = ""
    while len(text) < MIN_CHARACTERS:
        more = _sentence(draw)
        if len(text) + len(more) <= MAX_CHARACTERS:
            text += more
    return text
