"""Regex entity extraction, used to link memories that talk about the same thing.

Entities are cheap, exact keys: mentions (@alice), tags (#project-x), emails, URLs, dates and
capitalised names. Each has a `norm`, the lower-cased canonical key stored in `entities.norm` and
matched at query time, so "@Alice", "Alice" and "alice" meet on the same key ("alice") whatever
their kind. Everything here is a heuristic tuned to avoid noise: a wrong entity links unrelated
memories, a missed one only loses a ranking boost.

CJK and other caseless scripts produce no names (there is no capitalisation to go on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Entity", "extract_entities", "query_entity_keys"]


@dataclass(frozen=True, slots=True)
class Entity:
    """One entity: its `kind` (mention, tag, email, url, date or name), `value` as written in
    the text, `norm` the key used for matching."""

    kind: str
    value: str
    norm: str


# --- patterns ------------------------------------------------------------------------------------

_URL_RE = re.compile(r"\b(?:https?://|www\.)[^\s<>\"'`]+", re.IGNORECASE)
_EMAIL_RE = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}"  # local part
    r"@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}\b"  # domain
)
# Lookbehinds keep "bob@example" (an email) and "x.com/@user" paths out of mentions.
_MENTION_RE = re.compile(r"(?<![\w@./+-])@(?P<v>\w+(?:[.-]\w+)*)")
# Tags need a letter: "#1" and "#42" are issue numbers or ordinals, not topics.
_TAG_RE = re.compile(r"(?<![\w#&/])#(?P<v>\w+(?:-\w+)*)")
_HEX_COLOUR_RE = re.compile(r"(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")

_MONTH_NAMES = (
    "january february march april may june july august september october november december"
).split()
_MONTHS: dict[str, int] = {}
for _number, _name in enumerate(_MONTH_NAMES, start=1):
    _MONTHS[_name] = _number
    _MONTHS[_name[:3]] = _number  # jan, feb, ...
_MONTHS["sept"] = 9
_MONTH_ALT = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"

# Most specific first: a full date must win over the "May 2023" inside "May 8, 2023".
# ASCII mode: `\d` must not match other scripts' digits, nor IGNORECASE let "ſ" match "s".
_DATE_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?a)(?<![\d-])(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?!\d)"),
    re.compile(r"(?a)(?<![\d/])(?P<y>\d{4})/(?P<m>\d{2})/(?P<d>\d{2})(?![\d/])"),
    re.compile(
        rf"(?ai)\b(?P<d>\d{{1,2}}){_ORD}(?:\s+of)?\s+(?P<mon>{_MONTH_ALT})\.?,?\s+(?P<y>\d{{4}})\b"
    ),
    re.compile(rf"(?ai)\b(?P<mon>{_MONTH_ALT})\.?\s+(?P<d>\d{{1,2}}){_ORD},?\s+(?P<y>\d{{4}})\b"),
    re.compile(rf"(?ai)\b(?P<mon>{_MONTH_ALT})\.?,?\s+(?P<y>\d{{4}})\b"),
)

# Every date pattern has a four-digit year: a text without one skips them all.
_YEAR_HINT_RE = re.compile(r"(?a)\d{4}")

# Letters only (no digits/underscore), with inner apostrophes and hyphens: O'Brien, Jean-Luc.
_WORD_RE = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")

_TRAILING_WORD_RE = re.compile(r"(?<![^\W\d_])[^\W\d_]+$")
# Lower-case words that may sit inside a multi-word name: "Game of Thrones", "Ludwig van Beethoven".
_CONNECTORS = frozenset("of the de van von der den da di du del della la le al bin".split())
_CONTRACTION_SUFFIXES = frozenset({"m", "ll", "d", "ve", "re", "t"})
_HONORIFICS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "mt", "rev", "gen"})
_OPENERS = "\"'“‘«([{*•>–—-"  # skipped when looking back for the start of a sentence
# A colon counts: after "Note:" or "Caroline:" a capital says nothing about names.
_SENTENCE_END = ".!?…:\n\r"

# Capitalised words that are rarely names: they start sentences, are days/months, or are titles.
_STOPWORDS = frozenset(
    """
    a about above after again against all also although always am an and another any anyway are
    around as at back be because been before being below besides between both but by can cannot
    could dear did do does doing done down during each either else even ever every everyone
    everything few first for from further had has have having he hello her here hers herself hey
    hi him himself his how however i if in indeed instead into is it its itself just last later
    let like many maybe me meanwhile might mine more moreover most much must my myself neither
    never next no nobody none nor not nothing now of off oh ok okay on once one only or other our
    ours ourselves out over own perhaps please plus same second several she should since so some
    someone something sometimes soon still such sure than thank thanks that the their theirs them
    themselves then there therefore these they third this those though through thus to today
    tomorrow tonight too toward towards under unless until up upon us very was we well were what
    whatever when whenever where whereas wherever whether which while who whoever whom whose why
    will with within without would wow yeah yes yesterday yet you your yours yourself yourselves
    actually again already anyhow basically besides certainly clearly finally fortunately
    generally great hopefully honestly just lately luckily meanwhile nice note obviously often
    overall personally probably really recently sadly seriously so sorry speaking suddenly
    thankfully therefore unfortunately usually wait welcome yep nope cool awesome good bad
    morning afternoon evening night congrats congratulations dear sir madam
    add build call check create delete do edit find fix get give go install keep know look make
    move open put read remember remove run see send set show start stop take tell try update use
    write
    monday tuesday wednesday thursday friday saturday sunday
    mon tue tues wed thu thur thurs fri sat sun
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    mr mrs ms dr prof sr jr st mt rev gen
    bye goodbye woah whoa haha hah hehe lol omg aww aw ah uh um hmm yay gosh oops ugh yo dude
    guys hiya cheers happy merry birthday day week weekend month year
    user assistant system human bot tool agent model speaker author owner name date time
    note notes summary update error warning example answer question result results output input
    reason status context task goal problem solution issue description details title subject
    location source step info tip hint important ps re fwd response request query reply message
    comment feedback observation action thought plan decision outcome conclusion background
    overview prompt tags category priority
    """.split()
)


# --- helpers -------------------------------------------------------------------------------------


def _trim_url(url: str) -> str:
    """Drop sentence punctuation and unbalanced closing brackets glued to the end of a URL."""
    pairs = {")": "(", "]": "[", "}": "{"}
    while url:
        last = url[-1]
        if last in ".,;:!?'\"*":
            url = url[:-1]
        elif last in pairs and url.count(last) > url.count(pairs[last]):
            url = url[:-1]
        else:
            break
    return url


def _norm_url(url: str) -> str:
    return url.lower().rstrip("/")


def _days_in_month(year: int, month: int) -> int:
    # Written out rather than importing datetime, to keep this module's import cheap.
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _date_norm(m: re.Match[str]) -> str | None:
    groups = m.groupdict()
    year = int(groups["y"])
    month = int(groups["m"]) if groups.get("m") else _MONTHS[groups["mon"].lower()]
    if groups.get("mon") and not groups["mon"][0].isupper():
        return None  # "may 2023" in lower case is far more often the verb than the month
    if groups.get("d") is None:
        return f"{year:04d}-{month:02d}" if 1 <= month <= 12 else None
    day = int(groups["d"])
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)) or year < 1:
        return None  # 2023-02-30, 2023-13-01: not a date
    return f"{year:04d}-{month:02d}-{day:02d}"


def _is_sentence_start(text: str, pos: int) -> bool:
    """True if the word at `pos` opens a sentence (or a line), so its capital says nothing."""
    i = pos - 1
    while i >= 0:
        ch = text[i]
        if ch in "\n\r":
            return True
        if ch.isspace() or ch in _OPENERS:
            i -= 1
            continue
        if ch in _SENTENCE_END:
            if ch == ".":
                # "Dr. Smith": the period ends an honorific, not a sentence.
                before = _TRAILING_WORD_RE.search(text, max(0, i - 6), i)
                if before and before.group().lower() in _HONORIFICS:
                    return False
            return True
        return False
    return True


def _name_word(word: str) -> str | None:
    """The usable part of a capitalised word, or None if it cannot be (part of) a name."""
    if len(word) < 2 or not word[0].isupper() or word.isupper():
        return None  # lower case, a single letter, or an acronym (JSON, NASA, I)
    apos = max(word.rfind("'"), word.rfind("’"))
    if apos > 0:
        suffix = word[apos + 1 :].lower()
        if suffix == "s":
            word = word[:apos]  # possessive: Melanie's -> Melanie
        elif suffix in _CONTRACTION_SUFFIXES:
            return None  # I'm, Don't, We'll
    if word.lower() in _STOPWORDS:
        return None
    return word


def _norm_name(value: str) -> str:
    return " ".join(value.replace("’", "'").lower().split())


class _Run(NamedTuple):
    start: int
    end: int
    words: list[str]  # the capitalised words only, connectors left out
    at_sentence_start: bool
    speaker_label: bool  # "Caroline: ..." at the start of a line


def _at_line_start(text: str, pos: int) -> bool:
    """True if only whitespace or opening punctuation precedes `pos` on its line."""
    i = pos - 1
    while i >= 0 and text[i] not in "\n\r":
        if not (text[i].isspace() or text[i] in _OPENERS):
            return False
        i -= 1
    return True


def _name_runs(text: str) -> list[_Run]:
    """Runs of capitalised, non-stopword words joined by spaces (and inner connectors).

    Stopwords, punctuation and line breaks end a run; lower-case connectors ("of", "the", "van")
    may sit inside one, so "Lord of the Rings" and "Bank of America" stay whole.
    """
    runs: list[_Run] = []
    current: list[tuple[int, int, str]] = []  # (start, end, capitalised word)
    pending: list[int] = []  # ends of connectors waiting for a capitalised word to follow

    def flush() -> None:
        if current:
            start, end = current[0][0], current[-1][1]
            runs.append(
                _Run(
                    start,
                    end,
                    [w for _, _, w in current],
                    _is_sentence_start(text, start),
                    text.startswith(":", end) and _at_line_start(text, start),
                )
            )
            current.clear()
        pending.clear()

    def joined(start: int) -> bool:
        # Only plain spaces may join words into one name: a comma or newline separates names.
        prev_end = pending[-1] if pending else current[-1][1]
        gap = text[prev_end:start]
        return bool(gap) and not gap.strip(" \t\u00a0")

    for m in _WORD_RE.finditer(text):
        raw = m.group()
        if not current and not raw[0].isupper():
            continue  # the common case: a lower-case word outside any run (nothing to flush)
        word = _name_word(raw)
        if word is None:
            if current and raw in _CONNECTORS and len(pending) < 2 and joined(m.start()):
                pending.append(m.end())
            else:
                flush()
            continue
        start, end = m.start(), m.start() + len(word)
        if current and not joined(start):
            flush()
        pending.clear()
        current.append((start, end, word))
        if end != m.end():  # a possessive ends the name: "Melanie's Dog" is not one name
            flush()
    flush()
    return runs


def _names(text: str, *, query: bool) -> list[tuple[int, str, str]]:
    """(position, value, norm) of names; `query` relaxes the sentence-start rule."""
    found: list[tuple[int, str, str]] = []
    deferred: list[tuple[int, str, str]] = []
    for run in _name_runs(text):
        if len(run.words) > 3:
            continue  # a Title Case Heading, not a name
        value = text[run.start : run.end]
        item = (run.start, value, _norm_name(value))
        if query:
            found.append(item)
            if len(run.words) > 1:
                # Stored memories may name the person by one part only ("Caroline").
                found.extend((run.start, w, _norm_name(w)) for w in run.words)
        elif len(run.words) == 1 and run.at_sentence_start and not run.speaker_label:
            deferred.append(item)
        else:
            found.append(item)
    if deferred:
        # A capitalised word at a sentence start is accepted once the text also uses it where a
        # capital does mean a name ("Hi Caroline. ... Caroline went home.").
        known = {norm for _, _, norm in found}
        found.extend(item for item in deferred if item[2] in known)
    return found


def _scan(text: str, *, query: bool) -> list[tuple[int, Entity]]:
    """All entities with their start offsets (unsorted, possibly repeated)."""
    found: list[tuple[int, Entity]] = []
    # Each structured match is blanked out so later patterns (and names) never see its pieces:
    # no "example" name from a URL, no mention from an email. NUL is neither a word character nor
    # whitespace, so blanked spans also break name runs.
    chars = list(text)
    dirty = False

    def blank(start: int, end: int) -> None:
        nonlocal dirty
        chars[start:end] = "\0" * (end - start)
        dirty = True

    def remask(masked: str) -> str:
        nonlocal dirty
        if not dirty:
            return masked
        dirty = False
        return "".join(chars)

    # Cheap substring checks first: most texts have no URL, @, # or year, and the scans cost.
    has_url = "://" in text or "www." in text.lower()
    for m in _URL_RE.finditer(text) if has_url else ():
        url = _trim_url(m.group())
        if len(url) > len("https://"):
            found.append((m.start(), Entity("url", url, _norm_url(url))))
            blank(m.start(), m.start() + len(url))
    masked = remask(text)
    has_at = "@" in masked
    for m in _EMAIL_RE.finditer(masked) if has_at else ():
        found.append((m.start(), Entity("email", m.group(), m.group().lower())))
        blank(m.start(), m.end())
    masked = remask(masked)
    for m in _MENTION_RE.finditer(masked) if has_at else ():
        value = m.group("v").rstrip(".-")
        if value and not value.isdigit():
            found.append((m.start(), Entity("mention", "@" + value, value.lower())))
            blank(m.start(), m.start() + 1 + len(value))
    for m in _TAG_RE.finditer(masked) if "#" in masked else ():
        value = m.group("v")
        if (
            any(c.isalpha() for c in value)
            and not _HEX_COLOUR_RE.fullmatch(value)
            and not value.startswith("_")
        ):
            found.append((m.start(), Entity("tag", "#" + value, value.lower())))
            blank(m.start(), m.end())
    masked = remask(masked)
    for pattern in _DATE_PATTERNS if _YEAR_HINT_RE.search(masked) else ():
        for m in pattern.finditer(masked):
            norm = _date_norm(m)
            if norm is not None:
                found.append((m.start(), Entity("date", m.group(), norm)))
                blank(m.start(), m.end())
        masked = remask(masked)
    for pos, value, norm in _names(masked, query=query):
        found.append((pos, Entity("name", value, norm)))
    return found


def extract_entities(text: str) -> list[Entity]:
    """Entities in `text`, deduplicated by (kind, norm), in order of first appearance."""
    found = _scan(text, query=False)
    found.sort(key=lambda item: item[0])  # stable: ties keep detection order
    seen: set[tuple[str, str]] = set()
    result: list[Entity] = []
    for _, entity in found:
        key = (entity.kind, entity.norm)
        if key not in seen:
            seen.add(key)
            result.append(entity)
    return result


def query_entity_keys(text: str) -> list[str]:
    """Norms to look up for a query, in order, without duplicates.

    Unlike `extract_entities`, a capitalised word counts even at the start of the question
    ("Melanie painted what?"), and a multi-word name also yields its single words, because a
    question is short and its capitals are deliberate.
    """
    found = _scan(text, query=True)
    found.sort(key=lambda item: item[0])
    return list(dict.fromkeys(entity.norm for _, entity in found))
