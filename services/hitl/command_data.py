"""Rules for database clients: a read-only query may run, anything else asks.

``psql -c "select ..."`` only reads; ``psql -c "drop table users"``, ``mysql db < dump.sql``
or an interactive client can change data nobody can restore from git. A client call is
judged by the query it carries: writes are dangerous, a missing or unreadable query is
risky, and only a query made of read statements passes (the clients are on the
read-only allow-list for that case alone). Options that run a pager or write a file
(``psql -o``, ``mysql --tee``) are in ``command_readers``' option tables.
"""

from __future__ import annotations

import re

from services.hitl.command_options import (
    Context,
    Invocation,
    Rule,
    given,
    operands,
    option_values,
)

__all__ = ["DATA_RULES"]

_SQL_WRITE = re.compile(
    r"\b(insert|update|delete|drop|truncate|alter|create|grant|revoke|merge|copy|vacuum|"
    r"reindex|cluster|call|do|lock|comment|set|reset|refresh|into|replace|rename|load|"
    r"pg_terminate_backend|pg_cancel_backend|set_config|pg_reload_conf|lo_unlink|dblink)\b",
    re.IGNORECASE,
)
_SQL_READ = frozenset({"select", "show", "explain", "describe", "desc", "with", "values", "table"})
_SQL_READ |= {"use"}
_PSQL_QUERY = frozenset({"-c", "--command"})
_MYSQL_QUERY = frozenset({"-e", "--execute", "-q", "--query"})  # mysql, clickhouse-client
_MYSQL_QUERY |= {"--init-command"}  # runs on connect, before the query
_PSQL_META_READ = re.compile(r"^\\(d[a-zA-Z+]*|l\+?|dn|dt|du|conninfo|x|timing)(\s|$)")
_SQLITE_DOT_READ = re.compile(r"^\.(tables|schema|indexes|indices|headers|mode|databases)\b")
_MONGO_WRITE = re.compile(
    r"\b(drop\w*|delete\w*|remove|insert\w*|update\w*|replace\w*|rename\w*|create\w*|"
    r"bulkWrite|findAndModify|findOneAnd\w+|shutdownServer|eval|runCommand|adminCommand)\b"
    r"|\$out\b|\$merge\b",
)
_REDIS_READ = frozenset(
    {"get", "mget", "keys", "scan", "info", "ping", "ttl", "pttl", "type", "exists", "strlen"}
    | {"hget", "hgetall", "hkeys", "hlen", "hmget", "lrange", "llen", "smembers", "scard"}
    | {"zrange", "zcard", "zscore", "dbsize", "memory", "xrange", "xlen", "monitor", "time"}
)
_REDIS_DESTROY = frozenset({"flushall", "flushdb", "shutdown", "debug", "config", "script"})
_REDIS_DESTROY |= {"replicaof", "slaveof", "cluster", "failover", "acl", "module"}
_REDIS_ARG_OPTS = frozenset({"-h", "-p", "-a", "-n", "-u", "-s", "--user", "--pass", "-r", "-i"})


def _sql_verdict(ctx: Context, inv: Invocation, query: str | None) -> None:
    client = inv.key
    if query is None:
        ctx.flag("risky", f"database client without a read-only query ({client}): {inv.display}")
        return
    for statement in filter(None, (s.strip() for s in query.split(";"))):
        if statement.startswith("\\"):
            if _PSQL_META_READ.match(statement):
                continue
            ctx.flag("dangerous", f"database client command ({client}): {inv.display}")
            return
        if statement.startswith(".") and _SQLITE_DOT_READ.match(statement):
            continue
        first = statement.split(None, 1)[0].lower()
        if _SQL_WRITE.search(statement) or first not in _SQL_READ:
            ctx.flag("dangerous", f"database write ({client}): {inv.display}")
            return


def _queries(args: tuple[str, ...], names: frozenset[str]) -> str | None:
    """Every query given with ``names`` (``psql -c a -c b``) as one script, or None."""
    found = option_values(args, names)
    return ";".join(found) if found else None


def _sql_client(ctx: Context, inv: Invocation, depth: int) -> None:
    names = _PSQL_QUERY if inv.key == "psql" else _MYSQL_QUERY
    if {"-f", "--file"} & {a.split("=", 1)[0] for a in inv.args}:
        _sql_verdict(ctx, inv, None)
        return
    _sql_verdict(ctx, inv, _queries(inv.args, names))


def _sqlite(ctx: Context, inv: Invocation, depth: int) -> None:
    if given(inv.args, frozenset({"-init"})):  # commands read from a file nobody saw
        _sql_verdict(ctx, inv, None)
        return
    ops = operands(inv.args, frozenset({"-cmd", "-separator", "-newline", "-nullvalue"}))
    # `-cmd` runs before the query: `.shell`, `.output` or a write there counts the same.
    script = [*option_values(inv.args, frozenset({"-cmd"})), *ops[1:]]
    _sql_verdict(ctx, inv, ";".join(script) if len(ops) > 1 else None)


def _mongo(ctx: Context, inv: Invocation, depth: int) -> None:
    code = _queries(inv.args, frozenset({"--eval"}))
    scripts = given(inv.args, frozenset({"-f", "--file"}))
    if code is None or scripts or any(a.endswith(".js") for a in operands(inv.args)):
        ctx.flag("risky", f"database client without a read-only query ({inv.key}): {inv.display}")
    elif _MONGO_WRITE.search(code):
        ctx.flag("dangerous", f"database write ({inv.key}): {inv.display}")


def _redis(ctx: Context, inv: Invocation, depth: int) -> None:
    words = operands(inv.args, _REDIS_ARG_OPTS)
    command = words[0].lower() if words else ""
    if command in _REDIS_DESTROY:
        ctx.flag("dangerous", f"database write (redis-cli {command}): {inv.display}")
    elif command not in _REDIS_READ:
        ctx.flag("risky", f"database client without a read-only query (redis-cli): {inv.display}")


DATA_RULES: dict[str, Rule] = {
    **dict.fromkeys(("psql", "mysql", "mariadb", "clickhouse-client"), _sql_client),
    **dict.fromkeys(("sqlite3", "duckdb"), _sqlite),
    **dict.fromkeys(("mongo", "mongosh"), _mongo),
    "redis-cli": _redis,
}
