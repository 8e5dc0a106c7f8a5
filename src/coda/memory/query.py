"""Read-only SQL against the memory (`coda memory sql`), with bound parameters.

Three independent guards keep it read-only: the statement must be a single read statement (SELECT, WITH,
VALUES, EXPLAIN, PRAGMA, SHOW, TABLE); the connection refuses writes (SQLite `mode=ro` + `PRAGMA query_only`,
PostgreSQL `READ ONLY` transaction and session); and the transaction is always rolled back. Parameters are
bound by the driver (`:name` placeholders), never formatted into the text, so a value holding SQL is inert.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError

from coda.config_base import INT_MAX, INT_MIN
from coda.memory.errors import QueryError, ReadOnlyQueryError
from coda.memory.store import Memory, first_line

READ_KEYWORDS = ("SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA", "SHOW", "TABLE")
_PARAM_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(str|int|float))?=(.*)$", re.DOTALL)
_INT_RE = re.compile(r"^-?(0|[1-9][0-9]*)$")
_FLOAT_RE = re.compile(r"^-?[0-9]+\.[0-9]+([eE][-+]?[0-9]+)?$")
_DOLLAR_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


@dataclass(frozen=True)
class QueryResult:
    """Rows of a read-only query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than max_rows


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """Parse `name=value` items into bind parameters.

    A value that is a plain integer or decimal becomes a number, anything else a string; `name:str=value`,
    `name:int=value` and `name:float=value` force the type.

    Raises:
        QueryError: `--param 'x'` without `=`, a bad name, a value of the wrong type, or a repeated name.
    """
    out: dict[str, Any] = {}
    for item in items:
        m = _PARAM_RE.match(item)
        if m is None:
            raise QueryError(f"--param {item!r} must look like name=value (name: letters, digits, '_')")
        name, typ, raw = m.group(1), m.group(2), m.group(3)
        if name in out:
            raise QueryError(f"--param '{name}' is given twice")
        try:
            if typ == "int" or (typ is None and _INT_RE.match(raw)):
                out[name] = int(raw)
                if not INT_MIN <= out[name] <= INT_MAX:
                    raise QueryError(f"--param '{name}' = {raw[:40]}: integers must lie in [{INT_MIN}, {INT_MAX}]")
            elif typ == "float" or (typ is None and _FLOAT_RE.match(raw)):
                out[name] = float(raw)
            else:
                out[name] = raw
        except ValueError:
            raise QueryError(f"--param '{name}' = {raw!r} is not a valid {typ}") from None
    return out


def _blank_literals(sql: str) -> str:
    """`sql` with string literals, quoted identifiers and comments replaced by spaces (same length)."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in ("'", '"'):
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:  # doubled quote escapes itself
                        j += 2
                        continue
                    break
                j += 1
            end = min(j + 1, n)
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            end = n if nl < 0 else nl
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            end = n if close < 0 else close + 2
        elif c == "$" and (m := _DOLLAR_RE.match(sql, i)):
            close = sql.find(m.group(0), m.end())
            end = n if close < 0 else close + len(m.group(0))
        else:
            out.append(c)
            i += 1
            continue
        out.append(" " * (end - i))
        i = end
    return "".join(out)


def check_read_statement(sql: str) -> str:
    """Return `sql` without a trailing `;` if it is one read statement.

    Raises:
        ReadOnlyQueryError: empty, several statements, or a statement that is not a read.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("the SQL statement is empty")
    bare = _blank_literals(sql).rstrip()
    body_end = len(bare)
    if bare.endswith(";"):
        body_end -= 1
    if ";" in bare[:body_end]:
        raise ReadOnlyQueryError("coda memory sql runs one statement at a time; remove the ';' between statements")
    words = bare[:body_end].split()
    if not words:
        raise QueryError("the SQL statement holds only comments")
    first = re.sub(r"[^A-Za-z].*$", "", words[0]).upper()
    if first not in READ_KEYWORDS:
        raise ReadOnlyQueryError(
            f"coda memory sql is read-only: a {first or words[0][:20]!r} statement is refused "
            f"(allowed: {', '.join(READ_KEYWORDS)})"
        )
    return sql[:body_end].rstrip() if bare.endswith(";") else sql.rstrip()


def _is_write_refusal(e: DBAPIError) -> bool:
    sqlstate = getattr(e.orig, "sqlstate", None)
    if sqlstate == "25006":  # PostgreSQL: read_only_sql_transaction
        return True
    msg = str(e.orig).lower()
    return "readonly database" in msg or "read-only" in msg or "query_only" in msg


def run_readonly_query(
    memory: Memory, sql: str, params: Mapping[str, Any] | None = None, *, max_rows: int = 1000,
    timeout_s: float = 30.0,
) -> QueryResult:
    """Run one read statement with bound parameters in a read-only transaction that is rolled back.

    Args:
        memory: an open Memory (read-only or not: the query's own connection is made read-only).
        sql: one SELECT / WITH / VALUES / EXPLAIN / PRAGMA / SHOW / TABLE statement with `:name` placeholders.
        params: values for the placeholders.
        max_rows: keep at most this many rows (`truncated` says whether more existed).
        timeout_s: the statement is cancelled after this long (SQLite: a progress handler; PostgreSQL:
            `statement_timeout`).

    Returns:
        QueryResult with column names and rows.

    Raises:
        ReadOnlyQueryError: the statement writes (refused before or by the database; nothing is changed).
        QueryError: a placeholder without a value, a value without a placeholder, the timeout, or a database
            error.
    """
    params = dict(params or {})
    if not timeout_s > 0:
        raise QueryError(f"timeout_s = {timeout_s}: must be > 0")
    if max_rows < 1:
        raise QueryError(f"max_rows = {max_rows}: must be >= 1")
    stmt_text = check_read_statement(sql)
    stmt = text(stmt_text)
    wanted = set(stmt.compile().params)
    missing = sorted(wanted - set(params))
    if missing:
        raise QueryError(f"parameter ':{missing[0]}' has no value; pass --param {missing[0]}=VALUE")
    unused = sorted(set(params) - wanted)
    if unused:
        raise QueryError(f"--param '{unused[0]}' is not used by the statement (placeholders: {sorted(wanted)})")
    engine = memory.read_engine
    deadline = time.monotonic() + timeout_s
    try:
        with engine.connect() as conn:
            raw = None
            try:
                if conn.dialect.name == "sqlite":
                    conn.exec_driver_sql("PRAGMA query_only = ON")
                    raw = conn.connection.dbapi_connection
                    # a non-zero return aborts the statement ("interrupted"): checked every 10 000 VM steps
                    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
                else:
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                    conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
                result = conn.execute(stmt, params)
                if not result.returns_rows:
                    return QueryResult(columns=[], rows=[], truncated=False)
                columns = list(result.keys())
                rows = [tuple(r) for r in result.fetchmany(max_rows + 1)]
                return QueryResult(columns=columns, rows=rows[:max_rows], truncated=len(rows) > max_rows)
            finally:
                if raw is not None:
                    raw.set_progress_handler(None, 0)
                conn.rollback()
                if conn.dialect.name == "sqlite":
                    conn.invalidate()  # query_only stays set on the connection: keep it out of the pool
    except DBAPIError as e:
        if time.monotonic() > deadline or "statement timeout" in str(e) or "canceling statement" in str(e):
            raise QueryError(f"query stopped after its time limit of {timeout_s:g}s") from None
        if _is_write_refusal(e):
            raise ReadOnlyQueryError(f"coda memory sql is read-only; the database refused: {first_line(e)}") from None
        raise QueryError(f"query failed: {first_line(e)}") from None
    except StatementError as e:
        raise QueryError(f"query failed: {first_line(e)}") from None
    except SQLAlchemyError as e:
        raise QueryError(f"query failed: {first_line(e)}") from None
