"""api/core/store.py on SQLite and on PostgreSQL: what is saved comes back, lists page and
filter in creation order, writes are committed, and the schema is versioned."""

from __future__ import annotations

import asyncio
import os

import pytest
from e2e.flint_process import free_port
from litestar.testing import TestClient
from sqlalchemy import text, update

from api.core.store import Store, UnknownCursorError
from api.core.store import store_url as resolve_store_url
from api.core.store_schema import SCHEMA_VERSION, SchemaTooNewError, schema_version
from api.server.cli import build_parser
from api.server.serve import settings_from_args
from api.server.settings import Settings


def run(url: str, scenario) -> object:
    """`scenario(store)` on an opened store, closed afterwards."""
    async def main():
        store = Store(url)
        await store.open()
        try:
            return await scenario(store)
        finally:
            await store.close()
    return asyncio.run(main())


async def save(store: Store, index: int, *, created_at: int = 1000, metadata=None, model: str = "m") -> str:
    completion_id = f"chatcmpl-{index}"
    messages = [{"id": f"{completion_id}-{i}", "role": "user", "content": f"m{i}"} for i in range(3)]
    await store.save_chat_completion(completion_id, model, created_at, {"messages": [], "n": index}, messages,
                                     {"id": completion_id, "object": "chat.completion"}, metadata)
    return completion_id


def ids(page) -> list[str]:
    return [item.id for item in page.items]


def test_a_saved_completion_comes_back_whole_after_reopening(store_url):
    run(store_url, lambda store: save(store, 1, metadata={"k": "v"}))
    stored = run(store_url, lambda store: store.get_chat_completion("chatcmpl-1"))
    assert (stored.model, stored.created_at, stored.metadata) == ("m", 1000, {"k": "v"})
    assert stored.request == {"messages": [], "n": 1}
    assert stored.completion == {"id": "chatcmpl-1", "object": "chat.completion"}
    assert [message["content"] for message in stored.messages] == ["m0", "m1", "m2"]
    assert run(store_url, lambda store: store.get_chat_completion("chatcmpl-2")) is None


def test_lists_page_in_creation_order_both_ways(store_url):
    async def scenario(store):
        # Saved out of creation order, and two in the same second: ties keep insertion order.
        for index, created_at in ((1, 30), (2, 10), (3, 20), (4, 20), (5, 40)):
            await save(store, index, created_at=created_at)
        first = await store.list_chat_completions(limit=2)
        second = await store.list_chat_completions(limit=2, after=first.items[-1].id)
        last = await store.list_chat_completions(limit=2, after=second.items[-1].id)
        newest = await store.list_chat_completions(limit=3, order="desc")
        older = await store.list_chat_completions(limit=3, order="desc", after=newest.items[-1].id)
        return first, second, last, newest, older

    first, second, last, newest, older = run(store_url, scenario)
    assert (ids(first), first.has_more) == (["chatcmpl-2", "chatcmpl-3"], True)
    assert (ids(second), second.has_more) == (["chatcmpl-4", "chatcmpl-1"], True)
    assert (ids(last), last.has_more) == (["chatcmpl-5"], False)
    assert (ids(newest), newest.has_more) == (["chatcmpl-5", "chatcmpl-1", "chatcmpl-4"], True)
    assert (ids(older), older.has_more) == (["chatcmpl-3", "chatcmpl-2"], False)


def test_lists_filter_by_model_and_every_metadata_pair(store_url):
    async def scenario(store):
        await save(store, 1, metadata={"team": "a", "env": "prod"})
        await save(store, 2, metadata={"team": "a", "env": "dev"})
        await save(store, 3, metadata={"team": "b", "env": "prod"}, model="other")
        await save(store, 4)
        return [ids(await store.list_chat_completions(**query)) for query in (
            {"metadata": {"team": "a"}}, {"metadata": {"team": "a", "env": "prod"}},
            {"metadata": {"env": "prod"}, "model": "m"}, {"model": "other"}, {"metadata": {"team": "c"}})]

    assert run(store_url, scenario) == [["chatcmpl-1", "chatcmpl-2"], ["chatcmpl-1"], ["chatcmpl-1"],
                                        ["chatcmpl-3"], []]


def test_an_unknown_cursor_is_an_error(store_url):
    async def scenario(store):
        await save(store, 1)
        await store.list_chat_completions(after="chatcmpl-9")
    with pytest.raises(UnknownCursorError):
        run(store_url, scenario)


def test_metadata_updates_replace_and_filters_follow(store_url):
    async def scenario(store):
        await save(store, 1, metadata={"team": "a"})
        updated = await store.update_chat_completion_metadata("chatcmpl-1", {"team": "b", "x": "y"})
        team_a = ids(await store.list_chat_completions(metadata={"team": "a"}))
        team_b = ids(await store.list_chat_completions(metadata={"team": "b"}))
        cleared = await store.update_chat_completion_metadata("chatcmpl-1", None)
        missing = await store.update_chat_completion_metadata("chatcmpl-9", {"a": "b"})
        return updated.metadata, team_a, team_b, cleared.metadata, missing

    assert run(store_url, scenario) == ({"team": "b", "x": "y"}, [], ["chatcmpl-1"], None, None)


def test_delete_removes_the_completion_and_its_metadata(store_url):
    async def scenario(store):
        await save(store, 1, metadata={"team": "a"})
        await save(store, 2, metadata={"team": "a"})
        deleted = await store.delete_chat_completion("chatcmpl-1")
        again = await store.delete_chat_completion("chatcmpl-1")
        remaining = ids(await store.list_chat_completions(metadata={"team": "a"}))
        return deleted, again, remaining, await store.get_chat_completion("chatcmpl-1")

    assert run(store_url, scenario) == (True, False, ["chatcmpl-2"], None)


def test_messages_page_by_their_ids(store_url):
    async def scenario(store):
        await save(store, 1)
        first = await store.list_chat_completion_messages("chatcmpl-1", limit=2)
        rest = await store.list_chat_completion_messages("chatcmpl-1", limit=2, after="chatcmpl-1-1")
        backwards = await store.list_chat_completion_messages("chatcmpl-1", order="desc")
        return first, rest, backwards, await store.list_chat_completion_messages("chatcmpl-9")

    first, rest, backwards, missing = run(store_url, scenario)
    assert ([m["id"] for m in first.items], first.has_more) == (["chatcmpl-1-0", "chatcmpl-1-1"], True)
    assert ([m["id"] for m in rest.items], rest.has_more) == (["chatcmpl-1-2"], False)
    assert [m["content"] for m in backwards.items] == ["m2", "m1", "m0"]
    assert missing is None


def test_responses_are_saved_listed_and_deleted(store_url):
    items = [{"id": f"msg_{i}", "type": "message"} for i in range(3)]

    async def scenario(store):
        await store.save_response("resp_1", "m", 5, {"input": "hi"}, items, {"id": "resp_1"}, {"k": "v"})
        stored = await store.get_response("resp_1")
        page = await store.list_input_items("resp_1", after="msg_0", limit=1)
        backwards = await store.list_input_items("resp_1", order="desc")
        deleted = (await store.delete_response("resp_1"), await store.delete_response("resp_1"))
        return stored, page, backwards, deleted, await store.get_response("resp_1")

    stored, page, backwards, deleted, gone = run(store_url, scenario)
    assert (stored.request, stored.input_items, stored.response, stored.metadata) == (
        {"input": "hi"}, items, {"id": "resp_1"}, {"k": "v"})
    assert (page.items, page.has_more) == ([items[1]], True)
    assert backwards.items == items[::-1]
    assert (deleted, gone) == ((True, False), None)


def test_the_schema_version_is_stamped_and_a_newer_one_refused(store_url):
    async def stamped(store):
        async with store.db.connect() as connection:
            return (await connection.execute(schema_version.select())).scalars().all()
    assert run(store_url, stamped) == [SCHEMA_VERSION]

    async def from_the_future(store):
        async with store.db.begin() as connection:
            await connection.execute(update(schema_version).values(version=SCHEMA_VERSION + 1))
    run(store_url, from_the_future)
    with pytest.raises(SchemaTooNewError):
        run(store_url, stamped)


def test_text_with_the_nul_character_is_stored(store_url):
    """Sampled text may hold U+0000 (a byte-level vocabulary has a token for byte 0), which
    PostgreSQL's jsonb cannot hold: the payload columns keep it."""
    async def scenario(store):
        await store.save_chat_completion("chatcmpl-nul", "m", 1, {"messages": []}, [],
                                         {"choices": [{"message": {"content": "a\x00b"}}]}, None)
        return await store.get_chat_completion("chatcmpl-nul")
    assert run(store_url, scenario).completion["choices"][0]["message"]["content"] == "a\x00b"


def test_a_version_1_postgresql_store_moves_its_payloads_off_jsonb(postgres_store_url):
    """Version 1 kept payloads in jsonb on PostgreSQL; opening such a store migrates them to
    json, keeping what was stored, and NUL characters can then be saved."""
    async def make_version_1(store):
        await save(store, 1, metadata={"k": "v"})
        async with store.db.begin() as connection:
            for table, column in PAYLOAD_COLUMNS:
                await connection.execute(text(f'ALTER TABLE {table} ALTER COLUMN "{column}" TYPE jsonb '
                                              f'USING "{column}"::jsonb'))
            await connection.execute(update(schema_version).values(version=1))
    run(postgres_store_url, make_version_1)

    async def column_types(store):
        async with store.db.connect() as connection:
            rows = await connection.execute(text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE data_type IN ('json', 'jsonb')"))
            return {(table, column): kind for table, column, kind in rows}
    assert set(run(postgres_store_url, column_types).values()) == {"json"}
    assert run(postgres_store_url, lambda store: store.get_chat_completion("chatcmpl-1")).metadata == {"k": "v"}
    test_text_with_the_nul_character_is_stored(postgres_store_url)


PAYLOAD_COLUMNS = [("chat_completions", name) for name in ("metadata", "request", "messages", "completion")] + \
    [("responses", name) for name in ("metadata", "request", "input_items", "response")]


def test_the_default_store_is_a_sqlite_file_in_the_data_dir(tmp_path):
    url = resolve_store_url(str(tmp_path / "data"), None)
    assert url == f"sqlite+aiosqlite:///{tmp_path / 'data' / 'flint.db'}"
    run(url, lambda store: save(store, 1))
    assert (tmp_path / "data" / "flint.db").is_file()
    assert resolve_store_url(str(tmp_path), "postgresql+asyncpg://u@h/db") == "postgresql+asyncpg://u@h/db"


def test_store_urls_get_the_asyncio_driver_and_others_are_refused():
    assert resolve_store_url("", "postgresql://u:pw@h:5432/db") == "postgresql+asyncpg://u:pw@h:5432/db"
    assert resolve_store_url("", "sqlite:////srv/flint.db") == "sqlite+aiosqlite:////srv/flint.db"
    for url in ("mysql://u@h/db", "postgresql+psycopg2://u@h/db", "not a url"):
        with pytest.raises(ValueError):
            resolve_store_url("", url)


def test_serve_flags_choose_the_store(tmp_path):
    args = build_parser().parse_args(["serve", "--data-dir", str(tmp_path), "--store-url", "postgresql://h/db"])
    settings = settings_from_args(args)
    assert (settings.data_dir, settings.store_url) == (str(tmp_path), "postgresql://h/db")
    assert build_parser().parse_args(["serve"]).data_dir == os.environ["FLINT_DATA_DIR"]


def test_a_store_that_cannot_be_reached_stops_start_up(tiny_app_factory):
    app = tiny_app_factory(Settings(store_url=f"postgresql://flint@127.0.0.1:{free_port()}/flint"))
    with pytest.raises(ExceptionGroup) as raised:  # the test client's task group re-raises it
        with TestClient(app=app):
            pass
    assert raised.group_contains(ConnectionRefusedError, depth=None)
    assert app.state.server.engine is None  # the engine was never loaded
