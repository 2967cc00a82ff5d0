"""What a sentence says about a sensitive profile field: "Priya lives in Madrid" -> city Madrid.

A consent proposal stores the field's value ("Madrid"), not the sentence it came in, and
accepting it supersedes the profile facts that state the same field. Consolidation's model
names the value itself (`profile` items); a `remember --field` text or a fact the model filed
under `profile` is a sentence, read here by a few cue patterns per field (English, as the
extraction prompt writes facts). No cue: not a statement of the field (`field_value` None);
`remember` then takes the whole text as the value, as "city: Porto" or a bare "Porto" gives.
`field_text` keeps the field's name in a stored text that would lose it: a bare "Madrid" is
stored as "City: Madrid", which `field_value` reads back.
"""

from __future__ import annotations

import re

# Words that may join the capitalised words of a place or a name ("Rio de Janeiro").
_JOINERS = {"de", "da", "do", "dos", "das", "del", "della", "di", "la", "le", "am", "an",
            "upon", "on", "of", "van", "von", "y", "al", "el", "bin", "ibn"}
_WORD = re.compile(r"[^\W\d_][\w'’.-]*")
_STOP = re.compile(r"[,;:!?()\[\]\"]|\.(?:\s|$)")

_CUES = {
    "city": re.compile(
        r"\b(?:lives?|living|resides?|residing|is based|based|(?:has )?moved|moving|"
        r"relocated|relocating|settled)\s+(?:in|to)\s+|\b(?:home ?town|home city|city)\s+is\s+",
        re.IGNORECASE),
    "preferred_name": re.compile(
        r"\b(?:preferred name is|prefers to be called|prefers being called|likes to be "
        r"called|wants to be called|asks to be called|goes by(?: the name)?|call (?:me|her|him|"
        r"them))\s+", re.IGNORECASE),
    "language": re.compile(
        r"\b(?:preferred language is|language is|prefers to (?:speak|talk|write|chat)(?: in)?|"
        r"prefers speaking|speaks|(?:speak|talk|write|chat)s? in)\s+", re.IGNORECASE),
    "pronouns": re.compile(r"\bpronouns\s+(?:are|is)\s+", re.IGNORECASE),
}
_PRONOUNS = re.compile(
    r"\b(?:she/her(?:/hers)?|he/him(?:/his)?|they/them(?:/theirs)?|ze/(?:zir|hir)(?:/zirs)?|"
    r"xe/xem(?:/xyrs)?|it/its|any pronouns)\b", re.IGNORECASE)
_EXPLICIT = re.compile(r"^\s*([^\W\d][\w ]*?)\s*[:=]\s*(.+)$")
LABELS = {"city": "City", "preferred_name": "Preferred name", "pronouns": "Pronouns",
          "language": "Language"}


def field_value(field: str, text: str) -> str | None:
    """The value of `field` the text states, or None when it states none."""
    explicit = _EXPLICIT.match(text)
    label = explicit.group(1).casefold().replace(" ", "_") if explicit else ""
    if explicit and label in (field, field.replace("_", "")):
        return explicit.group(2).strip() or None
    if field == "pronouns":
        found = _PRONOUNS.search(text)
        if found:
            return found.group(0).lower()
    cue = _CUES.get(field)
    found = cue.search(text) if cue else None
    return _value_after(text[found.end():]) if found else None


def _value_after(rest: str) -> str | None:
    """The capitalised words at the start of `rest` ("Madrid", "Rio de Janeiro"); a value
    in lower case runs to the end of its clause."""
    clause = _STOP.split(rest, maxsplit=1)[0].strip()
    words = _WORD.findall(clause)
    if not words:
        return None
    if not words[0][0].isupper():
        return clause.rstrip(".") or None
    kept: list[str] = []
    for i, word in enumerate(words):
        if word[0].isupper():
            kept.append(word)
        elif word in _JOINERS and i + 1 < len(words) and words[i + 1][0].isupper():
            kept.append(word)
        else:
            break
    return " ".join(kept).rstrip(".") or None


def field_text(field: str, value: str, text: str) -> str:
    """The text to store for a field's value: `text` when it states the field ("Priya lives in
    Madrid"), else the field named with the value ("City: Madrid", not a bare "Madrid")."""
    if field_value(field, text) is not None and text.strip(" .").casefold() != value.casefold():
        return text
    return f"{LABELS.get(field, field)}: {value}"
