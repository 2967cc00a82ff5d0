"""Entity types (person, place, organisation, project) where a regex can tell, else none.

The extraction (`memcli.entities`) finds names, not what they name. A type is read from the
name's own words ("Santa Maria Hospital", "University of Porto", "Lake Como", "Project Phoenix")
and from the words just around a mention ("Dr. Lee", "my sister Ana", "works at Acme", "moved
to Lisbon", "the Phoenix project"). Anything else stays untyped: a wrong type misleads an agent
more than a missing one. `entity_type` votes over every mention it is given.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

TYPES = ("person", "organisation", "place", "project")  # also the tie-break order

_ORG_LAST = frozenset(
    "inc ltd llc gmbh plc corp corporation company co group bank university college school "
    "hospital clinic institute foundation association agency ministry council society labs "
    "technologies systems airlines airways club church union federation".split())
_ORG_FIRST = re.compile(r"^(?:university|bank|department|ministry|church|college) of\b", re.I)
_PLACE_LAST = frozenset(
    "street road avenue boulevard lane city park lake river mountain mountains island islands "
    "beach county valley bay airport station square bridge falls desert forest coast harbor "
    "harbour province village town peninsula canyon".split())
_PLACE_FIRST = frozenset("mount mt lake fort port cape".split())

_PERSON_BEFORE = re.compile(
    r"(?:\b(?:mr|mrs|ms|miss|mx|dr|prof|professor|sir|dame|aunt|auntie|uncle)\.?"
    r"|\b(?:my|his|her|their|our|your)\s+(?:wife|husband|partner|friend|best friend|boyfriend|"
    r"girlfriend|sister|brother|mother|father|mom|mum|dad|son|daughter|boss|colleague|coworker|"
    r"co-worker|manager|cousin|grandma|grandmother|grandfather|grandpa|neighbou?r|niece|nephew|"
    r"fianc[ée]e?|roommate|therapist|doctor|teacher)\s*,?)\s+$", re.I)
_ORG_BEFORE = re.compile(
    r"\b(?:works?|worked|working|job|jobs|employed|intern(?:ing|ed)?|hired|joined|joins|joining)"
    r"\s+(?:at|for|by|with)?\s*$", re.I)
_PLACE_BEFORE = re.compile(
    r"\b(?:live|lives|lived|living|moved|move|moves|moving|born|based|located|raised|"
    r"travel(?:l)?ed|travel(?:l)?ing|travel|trip|trips|flew|fly|flying|flight|vacation|"
    r"holiday|stay|stayed|staying|visit|visited|visiting|went|going|arrived|relocated)"
    r"\s+(?:in|to|at|from|near)\s+$", re.I)
_PROJECT_BEFORE = re.compile(r"\b(?:project|working on|work on|works on|worked on)\s+$", re.I)
_PROJECT_AFTER = re.compile(r"^\s+project\b", re.I)


def type_of_name(name: str) -> str | None:
    """The type a name's own words give ("Acme Corp", "Lake Como", "Project X"), or None."""
    words = [w.strip(".,").lower() for w in name.split()]
    if not words:
        return None
    if len(words) > 1 and words[0] == "project":
        return "project"
    if len(words) > 1 and (words[-1] in _ORG_LAST or _ORG_FIRST.match(name)):
        return "organisation"
    if len(words) > 1 and (words[-1] in _PLACE_LAST or words[0] in _PLACE_FIRST):
        return "place"
    return None


def type_in_context(before: str, after: str) -> str | None:
    """The type the words around one mention give, or None."""
    if _PERSON_BEFORE.search(before):
        return "person"
    if _PROJECT_BEFORE.search(before) or _PROJECT_AFTER.match(after):
        return "project"
    if _ORG_BEFORE.search(before):
        return "organisation"
    if _PLACE_BEFORE.search(before):
        return "place"
    return None


def mention_types(text: str, spellings: Iterable[str]) -> list[str]:
    """The types of each mention of any of `spellings` in `text` (case-insensitive)."""
    out: list[str] = []
    for spelling in {s for s in spellings if s}:
        if (kind := type_of_name(spelling)) is not None:
            out.append(kind)
            continue
        pattern = re.compile(r"(?<!\w)" + re.escape(spelling) + r"(?!\w)", re.I)
        for m in pattern.finditer(text):
            kind = type_in_context(text[max(0, m.start() - 60):m.start()], text[m.end():][:30])
            if kind is not None:
                out.append(kind)
    return out


def entity_type(kinds: Iterable[str], norm: str, types: Iterable[str]) -> str | None:
    """One entity's type: a mention (@handle) is a person, a #project-... tag a project; else
    the most frequent of the mention types (ties in TYPES order), or None."""
    kinds = set(kinds)
    votes = Counter(types)
    if votes:
        return min(votes, key=lambda t: (-votes[t], TYPES.index(t)))
    if "mention" in kinds:
        return "person"
    if "tag" in kinds and norm.startswith("project"):
        return "project"
    return None
