"""What every request model shares: the base that refuses a misspelt field, the scope keys
(`Scope`: tenant, user, session, app), the time type, and the query text's one check.

A request model (memcli.operations.requests, memcli.acb.build, ...) is built from these, so a
scope key is declared once, with one spelling and one help, from the CLI's flag to the HTTP
body and the MCP schema. A field's old spelling (a model's `OLD`) is still read, as a pydantic
validation alias, until REMOVED_IN; the schemas and the JSON answers use the one spelling.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from memcli.core.inputs import check_text
from memcli.core.records import parse_ts

# The release that stops reading the old spellings of the request fields.
REMOVED_IN = "0.2.0"
# Bounds on a query (a 100,000-character query ran past 60 s, in e5's window averaging and
# an OR of thousands of terms). What each leg can use: e5 reads 512 tokens per window
# (~2,000 characters of English; longer text is averaged over windows, blurring the vector),
# SPLADE keeps 64 query tokens, and BM25 scores an OR of terms, where the first 64 distinct
# terms carry a question. Longer queries are cut there, and the request says so.
MAX_QUERY_CHARS = 2000


def bound_query(text: str) -> str:
    """The query as the legs search it: its first MAX_QUERY_CHARS characters."""
    return text if len(text) <= MAX_QUERY_CHARS else text[:MAX_QUERY_CHARS]


def _time(value: str | None) -> str | None:
    return None if value is None else parse_ts(value)


# An ISO 8601 date or time, kept in memcli's stored form.
Time = Annotated[str | None, AfterValidator(_time)]


def old_spellings(old: dict[str, str]) -> AliasGenerator:
    """Each field read by its name, and by its old spelling in `old` (field -> old name)."""
    def choices(name: str) -> AliasChoices | None:
        return AliasChoices(name, old[name]) if name in old else None

    return AliasGenerator(validation_alias=choices)  # type: ignore[arg-type]  # None: no alias


class Request(BaseModel):
    """Every request model: a misspelt field is refused, never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True, populate_by_name=True)
    # A field's old spelling, read until REMOVED_IN (a model with some sets its alias
    # generator to `old_spellings(OLD)`).
    OLD: ClassVar[dict[str, str]] = {}

    @classmethod
    def spelled(cls, data: dict[str, Any]) -> dict[str, Any]:
        """`data` with old spellings renamed to their fields (so a flag given for the field
        replaces the JSON's value under either name)."""
        names = {old: new for new, old in cls.OLD.items()}
        return {names.get(key, key): value for key, value in data.items()}


class TenantScope(Request):
    tenant_id: str | None = Field(
        default=None, min_length=1,
        description="Tenant (default: the configured one, else `default`).")


class UserScope(Request):
    user_id: str | None = Field(default=None, description="User id.")


class SessionScope(Request):
    session_id: str | None = Field(
        default=None, description="Session id (a query searches it first, widening to its "
                                  "user when it holds too little).")


class AppScope(Request):
    app_id: str | None = Field(default=None, description="App id.")


# Bases in reverse: pydantic lists a model's fields from its last base to its first.
class Scope(AppScope, SessionScope, UserScope, TenantScope):
    """Whose memory a request reads or writes; every key left out is not narrowed (a read that
    names no tenant reads the configured one). Each key is declared once, above, and an
    operation that takes only some of them inherits only those."""


class QueryText(Request):
    """A request's query text (its `query` field), checked here once (valid UTF-8) and cut to
    what the search legs use (MAX_QUERY_CHARS), `truncation()` saying so."""

    _chars: int | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _bounded(self) -> Any:
        text = getattr(self, "query", None)
        if text is not None:
            check_text(text, "the query")
            if len(text) > MAX_QUERY_CHARS:
                self._chars = len(text)
                # The `query` field of the model using it (declared there, as it needs it).
                setattr(self, "query", bound_query(text))  # noqa: B010
        return self

    def truncation(self) -> str | None:
        """The note that the query was cut, or None."""
        if self._chars is None:
            return None
        return (f"query truncated to its first {MAX_QUERY_CHARS} of {self._chars} characters "
                "(what the search legs can use)")
