"""The pool's JSON codecs over real Postgres: json and jsonb come back as the values that
went in (text beyond ASCII, big integers, nesting), in a column and inside a record."""

from __future__ import annotations

from services.common.db import Pool

VALUE = {"path": "src/módulo/файл.py", "big": 2**70, "nested": [1, {"ok": True, "none": None}]}


async def test_json_and_jsonb_round_trip(pool: Pool) -> None:
    row = await pool.fetchrow("select $1::jsonb as b, $2::json as j", VALUE, VALUE)
    assert row["b"] == VALUE
    assert row["j"] == VALUE


async def test_jsonb_inside_a_record_decodes_the_same(pool: Pool) -> None:
    rows = await pool.fetchval(
        "select array_agg(r) from (select 1 as id, $1::jsonb as value) r", VALUE
    )
    assert [tuple(r) for r in rows] == [(1, VALUE)]
