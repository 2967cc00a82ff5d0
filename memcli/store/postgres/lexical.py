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
it (`guess`); when the check fails, theta itself is a valid threshold (more essential lexemes
only add matches, so the new theta is at least the old one) and one retry with that split is
exact. Fewer than `limit` rows means there is no theta: the full statement runs.

The statistics (df, the memory count, the mean length) are the leg's own (schema.sql's kept
ones); the idf of each lexeme is computed by the same SQL expression as in the leg.
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
    SELECT lex.lexeme, lex.df,
           greatest(ln((corpus.n - lex.df + 0.5) / (lex.df::float8 + 0.5)), {legs.IDF_FLOOR})
    FROM lex, corpus ORDER BY lex.lexeme"""


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
    """A first threshold: the idf of the rarest lexeme, what one occurrence of it scores in a
    memory of mean length (tf 1: idf * (k1 + 1) / (1 + k1)). The `limit`-th best is usually
    a memory holding a rare lexeme, or a few common ones."""
    return max(x.idf for x in lexemes)


def search(db: Any, terms: list[str], filters: Filters, limit: int,
           context_weight: float = 0.5, trace: dict[str, Any] | None = None,
           first: float | None = None) -> list[tuple[int, float]]:
    """legs.lexical's result (same ids, order and scores), scoring only the matches of the
    essential lexemes when the check allows it. `trace` (if given) receives the plan taken
    ("full", "pruned", "retry") and the splits tried. `first`: the first split's threshold
    (default: `guess`); any value gives the same result, only the statements run differ."""
    if not terms:
        return []
    where, params = filters.sql()
    lexemes = query_lexemes(db, terms)
    plan = "full"
    if lexemes and sum(x.df for x in lexemes) >= PRUNE_MIN_POSTINGS:
        cut = split(lexemes, guess(lexemes) if first is None else first)
        tried = [cut]
        hits = pruned(db, terms, cut, where, params, limit, context_weight)
        if hits is not None and len(hits) == limit and not cut.holds(hits[-1][1]):
            second = split(lexemes, hits[-1][1])
            tried.append(second)
            hits = pruned(db, terms, second, where, params, limit, context_weight)
            plan = "retry"
        else:
            plan = "pruned"
        if trace is not None:
            trace["splits"] = tried
        if hits is not None and len(hits) == limit and tried[-1].holds(hits[-1][1]):
            if trace is not None:
                trace["plan"] = plan
            return hits
        plan = "full"
    if trace is not None:
        trace["plan"] = plan
    return legs.lexical(db, terms, filters, limit, context_weight)


def pruned(db: Any, terms: list[str], cut: Split, where: str, params: list, limit: int,
           context_weight: float) -> list[tuple[int, float]] | None:
    """The best `limit` matches holding an essential lexeme; None when nothing is common
    (the full statement is the same statement)."""
    if not cut.common or not cut.essential:
        return None
    rows = db.execute(legs.bm25_sql(len(terms), where, essential=True),
                      [*terms, " ".join(terms), context_weight, list(cut.essential), *params,
                       limit])
    return [(int(i), float(s)) for i, s in rows]


def match_counts(db: Any, terms: list[str], filters: Filters, cut: Split) -> tuple[int, int]:
    """The matches the full statement scores and those the pruned one scores (in the
    filters' scope): how much a split saves (bench/pg_tenant_profile.py, the tests)."""
    where, params = filters.sql()
    any_term = legs.tsquery_sql(len(terms))
    full = int(db.scalar(f"SELECT count(*) FROM memories m WHERE m.fts @@ {any_term}"
                         f" AND {where}", [*terms, *params]))
    if not cut.common or not cut.essential:
        return full, full
    essential = int(db.scalar(
        "SELECT count(*) FROM memories m WHERE m.fts @@ (SELECT string_agg(quote_literal(l),"
        f" ' | ')::tsquery FROM unnest(?::text[]) l) AND m.fts @@ {any_term}"
        f" AND {where}", [list(cut.essential), *terms, *params]))
    return full, essential
