"""Paraphrase or contradiction: what the words of two alike statements tell, without a model.

Two facts can share almost every word and still disagree. The cues that turn a statement into
its contradiction are few and visible in the words, so they are checked before anything merges:

- negation: "Sam will attend" / "Sam will not attend" ("not", "never", "no", "no longer",
  "n't", "none" ...): the two texts hold a different number of negations;
- numbers and dates: "at 3 pm" / "at 4 pm", "two children" / "three children", "12 May" /
  "20 May", "today" / "tomorrow": each text has one the other lacks;
- names: "manager is Tom" / "manager is Ben", "PostgreSQL" / "MySQL": each text has a
  capitalised word, not the first one, that the other lacks (the first word is the subject:
  "Sam will attend" / "Tom will attend" are two facts about two people, not a contradiction);
- tense: "lives" / "lived", "is" / "was", "will run" / "ran": a word and the other text's form
  of the same verb, one in the past and one not.

`differs(a, b)` names the first cue found (a pair with a cue is never merged without a model);
`contradicts(a, b)` names it only when the two texts are the same statement once the cue's
words are set aside (one may add or drop a word, none may swap one): such a pair is a
contradiction without asking anyone, and the newer statement supersedes the older. Measured on
a labelled set of 64 contradicting and 62 paraphrase pairs: bench/results/dedup-pairs.md.
"""

from __future__ import annotations

import re
import unicodedata

# "n't" and "cannot" are expanded first (expand_contractions), so "not" covers them.
NEGATIONS = frozenset("not never no none nothing nobody nowhere neither nor without".split())
NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred thousand million billion dozen half twice first second third fourth "
    "fifth sixth seventh eighth ninth tenth last next".split()
)
DATE_WORDS = frozenset(
    "today tomorrow yesterday tonight monday tuesday wednesday thursday friday saturday sunday "
    "january february march april may june july august september october november december "
    "morning afternoon evening night weekday weekend spring summer autumn fall winter".split()
)
# Forms that say when, whatever the verb: dropped with a tense cue ("will run" / "ran").
AUXILIARIES = frozenset(
    "will shall would going gonna is are am was were has have had did do "
    "does been be being used".split()
)
_IRREGULAR = {
    "be": ("am is are", "was were been"),
    "have": ("has have", "had"),
    "do": ("do does", "did done"),
    "go": ("go goes", "went gone"),
    "make": ("make makes", "made"),
    "take": ("take takes", "took taken"),
    "get": ("get gets", "got gotten"),
    "give": ("give gives", "gave given"),
    "come": ("come comes", "came"),
    "see": ("see sees", "saw seen"),
    "know": ("know knows", "knew known"),
    "say": ("say says", "said"),
    "tell": ("tell tells", "told"),
    "buy": ("buy buys", "bought"),
    "bring": ("bring brings", "brought"),
    "think": ("think thinks", "thought"),
    "leave": ("leave leaves", "left"),
    "feel": ("feel feels", "felt"),
    "find": ("find finds", "found"),
    "keep": ("keep keeps", "kept"),
    "meet": ("meet meets", "met"),
    "pay": ("pay pays", "paid"),
    "run": ("run runs", "ran"),
    "sell": ("sell sells", "sold"),
    "send": ("send sends", "sent"),
    "speak": ("speak speaks", "spoke spoken"),
    "spend": ("spend spends", "spent"),
    "teach": ("teach teaches", "taught"),
    "win": ("win wins", "won"),
    "write": ("write writes", "wrote written"),
    "begin": ("begin begins", "began begun"),
    "drive": ("drive drives", "drove driven"),
    "eat": ("eat eats", "ate eaten"),
    "fly": ("fly flies", "flew flown"),
    "grow": ("grow grows", "grew grown"),
    "hold": ("hold holds", "held"),
    "lead": ("lead leads", "led"),
    "lose": ("lose loses", "lost"),
    "sit": ("sit sits", "sat"),
    "sleep": ("sleep sleeps", "slept"),
    "swim": ("swim swims", "swam swum"),
    "wear": ("wear wears", "wore worn"),
    "build": ("build builds", "built"),
    "catch": ("catch catches", "caught"),
    "hear": ("hear hears", "heard"),
    "become": ("become becomes", "became"),
    "can": ("can", "could"),
    "will": ("will", "would"),
    "stand": ("stand stands", "stood"),
    "understand": ("understand understands", "understood"),
    "choose": ("choose chooses", "chose"),
}
_FORMS: dict[str, tuple[str, bool]] = {}  # word -> (lemma, is past)
for _lemma, (_present, _past) in _IRREGULAR.items():
    for _w in _present.split():
        _FORMS[_w] = (_lemma, False)
    for _w in _past.split():
        _FORMS[_w] = (_lemma, True)
# Words in -ed that are not past tenses ("need", "speed", "hundred", "red").
_NOT_PAST = frozenset(
    "need needs speed seed feed bed red shed hundred bleed breed proceed "
    "succeed exceed sacred naked wicked tired".split()
)

_CONTRACTIONS = [
    (re.compile(r"\bwon['’]t\b", re.IGNORECASE), "will not"),
    (re.compile(r"\bshan['’]t\b", re.IGNORECASE), "shall not"),
    (re.compile(r"\bcan['’]t\b", re.IGNORECASE), "can not"),
    (re.compile(r"\bcannot\b", re.IGNORECASE), "can not"),
    (re.compile(r"n['’]t\b", re.IGNORECASE), " not"),
    (re.compile(r"['’]ll\b", re.IGNORECASE), " will"),
    (re.compile(r"['’]re\b", re.IGNORECASE), " are"),
    (re.compile(r"['’]ve\b", re.IGNORECASE), " have"),
    (re.compile(r"(?<=\bI)['’]m\b"), " am"),
]
_WORD = re.compile(r"[\w'’-]+")
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def expand_contractions(text: str) -> str:
    """ "doesn't" -> "does not", "won't" -> "will not", "we'll" -> "we will": one spelling of
    each word, so "does not" and "doesn't" compare equal ("'s" and "'d" are ambiguous: kept)."""
    for pattern, full in _CONTRACTIONS:
        text = pattern.sub(full, text)
    return text


def negation_count(words: list[str]) -> int:
    """Negations among normalised words; "no longer" is one."""
    return sum(1 for w in words if w in NEGATIONS)


def content_words(text: str) -> tuple[set[str], set[str]]:
    """(numbers and dates, names): words with a digit, number and date words; capitalised
    words that do not start a sentence (names, places, products)."""
    numbers: set[str] = set()
    names: set[str] = set()
    words = list(_WORD.finditer(text))
    for i, m in enumerate(words):
        word = _POSSESSIVE.sub("", m.group(0).strip("'’-"))
        parts = re.findall(r"\w+", _fold(word))  # as normalised tokens: "jean-luc" -> 2
        if any(ch.isdigit() for ch in word) or _fold(word) in NUMBER_WORDS | DATE_WORDS:
            numbers.update(parts)
            continue
        starts_sentence = i == 0 or text[: m.start()].rstrip().endswith((".", "!", "?"))
        if word[:1].isupper() and not starts_sentence:
            names.update(parts)
    return numbers, names


def _fold(word: str) -> str:
    """Case and accents folded, as textrules.normalise folds them."""
    folded = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in folded if not unicodedata.combining(c))


def _verb(word: str) -> tuple[set[str], bool] | None:
    """(possible lemmas, is past) of a word that may be a verb form; None for a short word."""
    if word in _FORMS:
        lemma, past = _FORMS[word]
        return {lemma}, past
    if len(word) < 3:
        return None
    if word.endswith("ed") and word not in _NOT_PAST and len(word) > 3:
        stem = word[:-2]
        lemmas = {stem, stem + "e", word[:-1]}
        if stem.endswith("i"):
            lemmas.add(stem[:-1] + "y")  # studied -> study
        if len(stem) > 2 and stem[-1] == stem[-2]:
            lemmas.add(stem[:-1])  # stopped -> stop
        return lemmas, True
    lemmas = {word}
    if word.endswith("ing") and len(word) > 5:
        stem = word[:-3]
        lemmas |= {stem, stem + "e"}
        if stem[-1] == stem[-2]:
            lemmas.add(stem[:-1])
    elif word.endswith("ies"):
        lemmas.add(word[:-3] + "y")
    elif word.endswith("es"):
        lemmas |= {word[:-2], word[:-1]}
    elif word.endswith("s") and not word.endswith("ss"):
        lemmas.add(word[:-1])
    return lemmas, False


def _tense_pairs(only_a: set[str], only_b: set[str]) -> set[str]:
    """Words of a tense change: one text's form of a verb and the other's, past against not
    past ("lives" / "lived", "is" / "was", "run" / "ran")."""
    found: set[str] = set()
    for x in only_a:
        vx = _verb(x)
        if vx is None:
            continue
        for y in only_b:
            vy = _verb(y)
            if vy is not None and vx[1] != vy[1] and vx[0] & vy[0]:
                found |= {x, y}
    return found


def _cues(a: str, b: str, wa: list[str], wb: list[str]) -> tuple[str | None, set[str]]:
    """(the first cue, the words it accounts for) of two texts and their normalised words."""
    sa, sb = set(wa), set(wb)
    if negation_count(wa) != negation_count(wb):
        # "likes" / "does not like": the auxiliary comes with the negation
        return "negation", (sa ^ sb) & (NEGATIONS | {"longer", "do", "does", "did"})
    na, ma = content_words(a)
    nb, mb = content_words(b)
    if na - nb and nb - na:
        return "number or date", na ^ nb
    # A name the other text also has, only as its first word ("In May, Sam" / "Sam ... in
    # May"), is not a different name.
    only_a, only_b = (ma - mb) - sb, (mb - ma) - sa
    if only_a and only_b:
        return "name", only_a | only_b
    paired = _tense_pairs(sa - sb, sb - sa)
    if paired:
        rest = (sa ^ sb) & AUXILIARIES
        if "going" in sa ^ sb:
            rest.add("to")
        return "tense", paired | rest
    return None, set()


def _same_verbs(only_a: set[str], only_b: set[str]) -> set[str]:
    """Words that are forms of one verb in the same tense ("likes" / "like")."""
    found: set[str] = set()
    for x in only_a:
        vx = _verb(x)
        for y in only_b:
            vy = _verb(y)
            if vx is not None and vy is not None and vx[1] == vy[1] and vx[0] & vy[0]:
                found |= {x, y}
    return found


def differs(a: str, b: str, wa: list[str], wb: list[str]) -> str | None:
    """The cue (negation, number or date, name, tense) that makes `a` and `b` possibly say
    different things, or None; `wa`/`wb`: their normalised words (textrules.normalise)."""
    return _cues(a, b, wa, wb)[0]


def contradicts(a: str, b: str, wa: list[str], wb: list[str], *, alike: float = 0.6) -> str | None:
    """The cue when `b` is `a` with that one thing changed (the other words the same, one side
    at most adding some, their Jaccard >= `alike`): a contradiction, no model needed."""
    cue, words = _cues(a, b, wa, wb)
    if cue is None:
        return None
    ra, rb = set(wa) - words, set(wb) - words
    verbs = _same_verbs(ra - rb, rb - ra)
    ra, rb = ra - verbs, rb - verbs
    if (ra - rb) and (rb - ra):  # another word swapped too: not the same statement
        return None
    union = ra | rb
    return cue if union and len(ra & rb) / len(union) >= alike else None


# Before a participle, these make it present ("is interested", "has moved"), not a past tense.
_PRESENT_AUX = frozenset("is are am be being has have 's".split())


def has_past_verb(text: str) -> bool:
    """Whether a text holds a verb in the past tense ("discussed", "was", "went", "had"),
    not counting a participle after a present form ("is interested", "has moved")."""
    words = [w.casefold() for w in re.findall(r"[\w'’]+", expand_contractions(text))]
    for i, word in enumerate(words):
        verb = _verb(word)
        if verb is not None and verb[1] and (i == 0 or words[i - 1] not in _PRESENT_AUX):
            return True
    return False
