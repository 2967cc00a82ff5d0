"""The lexical leg on PostgreSQL over a large scope: BM25 that skips the matches which cannot
reach the top `limit` (MaxScore), with the results of the full statement (legs.bm25_sql).

The full statement scores every GIN match of the OR of the query's terms in the scope, then
keeps the best `limit`. Tenant-wide, a common word (`like`, `time`, `really`) matches tens of
thousands of memories that a rare one (a name, `adoption`) outranks: at 1M memories in 8 tenants
the leg took 264 / 668 ms p50 / p95, the slowest of a tenant-wide query
(bench/results/pg-tenant-profile-1m.md).

The bound: one lexeme adds idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) to a
memory's score, strictly less than idf * (k1 + 1) (the denominator's second term is at least
k1 * (1 - b) > 0). So a memory holding none of the query's lexemes but a set C scores below
the sum of C's bounds. MaxScore (Turtle and Flood, 1995) splits the lexemes in two: the most
common ones whose bounds sum below a threshold ("common") and the others ("essential").
Only the matches holding an essential lexeme are scored (on all the query's lexemes, as the
full statement does: their scores are the same); theta is the `limit`-th best of them. If the
common lexemes' summed bound is below theta (strictly), a memory holding common lexemes only
scores below theta too and cannot enter the top `limit`: the answer is the full statement's,
the same ids in the same order (ties at theta included: nothing skipped reaches theta).

The threshold is not known before the essential matches are scored. The first split guesses
it (`guess`); when the check fails, a second statement scores the matches the first one left
out that can still reach the top (`search`), and the two results merge into the same answer.

The statistics (df, the memory count, the mean length) are the leg's own (schema.sql's kept
ones); the idf of each lexeme is computed by the same SQL expression as in the leg.

Measured on the same database, both statements alternating (bench/results/pg-lexical-maxscore-1m.md,
193 queries, identical results): at 1M memories the leg 264 / 788 -> 147 / 617 ms p50 / p95,
matches scored 4.43M -> 3.02M; at 250k 49 / 131 -> 35 / 101 ms. One user's scope keeps the
full statement (a few ms: a statistics statement first would only add to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memcli.store.postgres import legs

if TYPE_CHECKING:
    from memcli.store.filters import Filters

# Below this many postings of the query's lexemes (their df summed, over all tenants), the
# full statement is cheap: scoring every match costs less than a second statement would.
PRUNE_MIN_POSTINGS = 5000
# The bounds are computed in float8 as the scores are; the check keeps a margin far above
# their rounding error (a few ulps) and far below the bound's own slack.
MARGIN = 1e-9
BOUND = legs.BM25_K1 + 1

_STATS = f"""WITH {legs._KEPT.format(config=legs.TEXT_CONFIG)}
    SELECT lex.lexeme, lex.df, {legs.IDF} FROM lex, corpus ORDER BY lex.lexeme"""


@dataclass(frozen=True)
class Lexeme:
    lexeme: str
    df: int
    idf: float

    @property
    def bound(self) -> float:
        """The most this lexeme adds to any memory's score (strictly less, in fact)."""
        return self.idf * BOUND


@dataclass(frozen=True)
class Split:
    essential: tuple[str, ...]
    common: tuple[str, ...]
    common_bound: float  # the common lexemes' summed bounds

    def holds(self, theta: float) -> bool:
        """No memory holding common lexemes only can reach `theta`."""
        return self.common_bound * (1 + MARGIN) + MARGIN < theta


def query_lexemes(db: Any, terms: list[str]) -> list[Lexeme]:
    """The query's lexemes with their df and idf, as the leg computes them."""
    rows = db.execute(_STATS, [" ".join(terms)])
    return [Lexeme(str(lx), int(df), float(idf)) for lx, df, idf in rows]


def split(lexemes: list[Lexeme], threshold: float) -> Split:
    """The longest run of the most common lexemes whose summed bounds stay below
    `threshold` (strictly), and the others (the rarest lexeme always: theta is the best
    `limit` of some matches)."""
    ordered = sorted(lexemes, key=lambda x: (x.bound, x.lexeme))
    common: list[str] = []
    total = 0.0
    for lexeme in ordered[:-1]:
        if total + lexeme.bound >= threshold:
            break
        total += lexeme.bound
        common.append(lexeme.lexeme)
    essential = tuple(x.lexeme for x in ordered[len(common):])
    return Split(essential, tuple(common), total)


def guess(lexemes: list[Lexeme]) -> float:
    """A first threshold: the idf of the rarest lexeme that is in the corpus, what one
    occurrence of it scores in a memory of mean length (tf 1: idf * (k1 + 1) / (1 + k1)).
    The `limit`-th best is usually a memory holding a rare lexeme, or a few common ones."""
    return max((x.idf for x in lexemes if x.df > 0), default=0.0)


def search(db: Any, terms: list[str], filters: Filters, limit: int,
           context_weight: float = 0.5, trace: dict[str, Any] | None = None,
           first: float | None = None) -> list[tuple[int, float]]:
    """legs.lexical's result (same ids, order and scores), scoring only the matches that can
    reach the top `limit`. `trace` (if given) receives the plan taken ("full", "pruned",
    "two") and the splits tried. `first`: the first split's threshold (default: `guess`);
    any value gives the same result, only the statements run differ.

    When the first split's check fails (theta1 below the common lexemes' summed bound, or
    fewer than `limit` essential matches: no theta1, taken as 0), theta1 is still a lower
    bound of the answer's theta (its matches are some of all the matches), so a shorter
    common run, whose bounds sum below theta1, is a valid split. The matches it adds (holding
    a lexeme of the first run's common ones but not of the second's, and none of the first
    essential ones, scored already) are scored by a second statement, and the two results
    merged: every match scored at most once, all of them at worst (no work lost)."""
    if not terms:
        return []
    where, params = filters.sql()
    lexemes = query_lexemes(db, terms)
    cut = split(lexemes, guess(lexemes) if first is None else first)
    if sum(x.df for x in lexemes) < PRUNE_MIN_POSTINGS or not cut.common:
        if trace is not None:
            trace.update(plan="full", splits=[])
        return legs.lexical(db, terms, filters, limit, context_weight)
    args = [*terms, " ".join(terms), context_weight]
    hits = _rows(db.execute(legs.bm25_sql(len(terms), where, essential=True),
                            [*args, list(cut.essential), *params, limit]))
    theta = hits[-1][1] if len(hits) == limit else 0.0
    if cut.holds(theta):
        if trace is not None:
            trace.update(plan="pruned", splits=[cut])
        return hits
    second = split(lexemes, theta / (1 + MARGIN) - MARGIN)
    added = [x for x in cut.common if x not in second.common]
    more = _rows(db.execute(legs.bm25_sql(len(terms), where, essential=True, exclude=True),
                            [*args, added, list(cut.essential), *params, limit]))
    if trace is not None:
        trace.update(plan="two", splits=[cut, second], added=added)
    return sorted(hits + more, key=lambda h: (-h[1], h[0]))[:limit]


def _rows(rows: Any) -> list[tuple[int, float]]:
    return [(int(i), float(s)) for i, s in rows]


def match_counts(db: Any, terms: list[str], filters: Filters,
                 essential: list[str] | None = None, exclude: list[str] | None = None) -> int:
    """The matches a statement scores in the filters' scope: every match of the OR of the
    terms (`essential` None: the full statement), or those holding an `essential` lexeme
    and no `exclude` one (bench/results/pg-lexical-maxscore-1m.md, the tests)."""
    where, params = filters.sql()
    sql_text = f"SELECT count(*) FROM memories m WHERE m.fts @@ {legs.tsquery_sql(len(terms))}"
    lexemes_q = legs.LEXEMES_OR
    args: list = [*terms]
    if essential is not None:
        sql_text += f" AND m.fts @@ {lexemes_q}"
        args.append(essential)
    if exclude:
        sql_text += f" AND NOT (m.fts @@ {lexemes_q})"
        args.append(exclude)
    return int(db.scalar(f"{sql_text} AND {where}", [*args, *params]))
