"""Stored chat completions and responses: SQLAlchemy over an async driver.

A SQLite file under the data directory by default (aiosqlite); PostgreSQL when the store
URL says so (`postgresql+asyncpg://user@host/db`). Every write is one transaction that has
committed when the method returns, so an object the API reported as stored survives the
process being killed. Payloads are JSON columns holding the objects as the API returns
them; the store never interprets them beyond the ids of their items."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from sqlalchemy import and_, delete, event, exists, insert, make_url, or_, select, update
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from api.core.store_schema import chat_completion_metadata, chat_completions, migrate, responses

Item = TypeVar("Item")
Order = Literal["asc", "desc"]
Json = dict[str, Any]
STORE_FILE = "flint.db"
# The asyncio driver the store uses for each database it supports.
ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}


def store_url(data_dir: str, url: str | None) -> str:
    """The database URL: `url` when given, else the SQLite file in `data_dir`. A URL
    without a driver gets the asyncio one (`postgresql://` means asyncpg); ValueError for
    a database or driver the store cannot use."""
    if not url:
        return f"sqlite+aiosqlite:///{Path(data_dir).expanduser().resolve() / STORE_FILE}"
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise ValueError(f"the store URL is not a database URL: {error}") from None
    backend = parsed.get_backend_name()
    if backend not in ASYNC_DRIVERS:
        raise ValueError(f"the store URL's database `{backend}` is not supported: use sqlite or postgresql")
    driver = ASYNC_DRIVERS[backend]
    if "+" in parsed.drivername and parsed.get_driver_name() != driver:
        raise ValueError(f"the store URL's driver `{parsed.get_driver_name()}` is not supported: "
                         f"use {backend}+{driver}")
    return parsed.set(drivername=f"{backend}+{driver}").render_as_string(hide_password=False)


@dataclass(frozen=True)
class Page(Generic[Item]):
    items: list[Item]
    has_more: bool


@dataclass(frozen=True)
class StoredChatCompletion:
    id: str
    model: str
    created_at: int
    metadata: dict[str, str] | None
    request: Json  # the request body as sent
    messages: list[Json]  # the request's messages, each with an "id"
    completion: Json  # the ChatCompletion as returned


@dataclass(frozen=True)
class StoredResponse:
    id: str
    model: str
    created_at: int
    metadata: dict[str, str] | None
    request: Json
    input_items: list[Json]  # each with an "id"
    response: Json


class UnknownCursorError(LookupError):
    """A list's `after` names no stored object."""


def page_of(items: Sequence[Item], item_id: Callable[[Item], str], after: str | None,
            limit: int, order: Order) -> Page[Item]:
    """One page of an in-order list of `items` (the items of one stored object)."""
    ordered = list(items) if order == "asc" else list(reversed(items))
    start = 0
    if after is not None:
        ids = [item_id(item) for item in ordered]
        if after not in ids:
            raise UnknownCursorError(after)
        start = ids.index(after) + 1
    return Page(ordered[start:start + limit], has_more=start + limit < len(ordered))


class Store:
    """The server's database. `open()` at start-up, `close()` at shutdown."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine | None = None

    async def open(self) -> None:
        """Connects, creating the SQLite file's directory and the schema as needed."""
        url = make_url(self.url)
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine = create_async_engine(self.url)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine.sync_engine, "connect", sqlite_foreign_keys)
        async with self.engine.begin() as connection:
            await connection.run_sync(migrate)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None

    @property
    def display_url(self) -> str:
        """The URL with its password hidden, for logs."""
        return make_url(self.url).render_as_string(hide_password=True)

    @property
    def db(self) -> AsyncEngine:
        if self.engine is None:
            raise RuntimeError("the store is not open")
        return self.engine

    # Chat completions

    async def save_chat_completion(self, completion_id: str, model: str, created_at: int, request: Json,
                                   messages: list[Json], completion: Json,
                                   metadata: dict[str, str] | None) -> None:
        row = dict(id=completion_id, model=model, created_at=created_at, metadata=metadata, request=request,
                   messages=messages, completion=completion)
        async with self.db.begin() as connection:
            await connection.execute(insert(chat_completions).values(**row))
            await insert_metadata(connection, completion_id, metadata)

    async def get_chat_completion(self, completion_id: str) -> StoredChatCompletion | None:
        async with self.db.connect() as connection:
            query = select(chat_completions).where(chat_completions.c.id == completion_id)
            row = (await connection.execute(query)).mappings().first()
        return None if row is None else chat_completion_of(row)

    async def list_chat_completions(self, *, model: str | None = None, metadata: dict[str, str] | None = None,
                                    after: str | None = None, limit: int = 20,
                                    order: Order = "asc") -> Page[StoredChatCompletion]:
        """A page in creation order; `metadata` keeps those holding every pair given.
        Raises UnknownCursorError when `after` names no stored completion."""
        table = chat_completions
        query = select(table)
        if model is not None:
            query = query.where(table.c.model == model)
        for key, value in (metadata or {}).items():
            pairs = chat_completion_metadata.c
            query = query.where(exists().where(pairs.completion_id == table.c.id, pairs.key == key,
                                               pairs.value == value))
        async with self.db.connect() as connection:
            if after is not None:
                query = query.where(await self.after_cursor(connection, after, order))
            keys = (table.c.created_at, table.c.seq)
            query = query.order_by(*(key.asc() if order == "asc" else key.desc() for key in keys))
            rows = (await connection.execute(query.limit(limit + 1))).mappings().all()
        return Page([chat_completion_of(row) for row in rows[:limit]], has_more=len(rows) > limit)

    async def after_cursor(self, connection: AsyncConnection, after: str, order: Order):
        """The condition for rows that follow `after` in `order`."""
        table = chat_completions
        query = select(table.c.created_at, table.c.seq).where(table.c.id == after)
        cursor = (await connection.execute(query)).first()
        if cursor is None:
            raise UnknownCursorError(after)
        created_at, seq = cursor
        if order == "asc":
            return or_(table.c.created_at > created_at, and_(table.c.created_at == created_at, table.c.seq > seq))
        return or_(table.c.created_at < created_at, and_(table.c.created_at == created_at, table.c.seq < seq))

    async def update_chat_completion_metadata(self, completion_id: str,
                                              metadata: dict[str, str] | None) -> StoredChatCompletion | None:
        """Replaces the metadata (None clears it); None when no such completion is stored."""
        async with self.db.begin() as connection:
            query = update(chat_completions).where(chat_completions.c.id == completion_id)
            result = await connection.execute(query.values(metadata=metadata))
            if result.rowcount == 0:
                return None
            pairs = chat_completion_metadata
            await connection.execute(delete(pairs).where(pairs.c.completion_id == completion_id))
            await insert_metadata(connection, completion_id, metadata)
        return await self.get_chat_completion(completion_id)

    async def delete_chat_completion(self, completion_id: str) -> bool:
        async with self.db.begin() as connection:
            pairs = chat_completion_metadata
            await connection.execute(delete(pairs).where(pairs.c.completion_id == completion_id))
            query = delete(chat_completions).where(chat_completions.c.id == completion_id)
            return (await connection.execute(query)).rowcount > 0

    async def list_chat_completion_messages(self, completion_id: str, *, after: str | None = None,
                                            limit: int = 20, order: Order = "asc") -> Page[Json] | None:
        """A page of the stored request's messages; None when no such completion is stored.
        Raises UnknownCursorError when `after` names none of its messages."""
        stored = await self.get_chat_completion(completion_id)
        if stored is None:
            return None
        return page_of(stored.messages, lambda message: message["id"], after, limit, order)

    # Responses (the Responses API)

    async def save_response(self, response_id: str, model: str, created_at: int, request: Json,
                            input_items: list[Json], response: Json, metadata: dict[str, str] | None) -> None:
        row = dict(id=response_id, model=model, created_at=created_at, metadata=metadata, request=request,
                   input_items=input_items, response=response)
        async with self.db.begin() as connection:
            await connection.execute(insert(responses).values(**row))

    async def get_response(self, response_id: str) -> StoredResponse | None:
        async with self.db.connect() as connection:
            query = select(responses).where(responses.c.id == response_id)
            row = (await connection.execute(query)).mappings().first()
        return None if row is None else StoredResponse(**row)

    async def delete_response(self, response_id: str) -> bool:
        async with self.db.begin() as connection:
            query = delete(responses).where(responses.c.id == response_id)
            return (await connection.execute(query)).rowcount > 0

    async def list_input_items(self, response_id: str, *, after: str | None = None, limit: int = 20,
                               order: Order = "asc") -> Page[Json] | None:
        """A page of a stored response's input items (by their "id"); None when no such
        response is stored. Raises UnknownCursorError when `after` names none of them."""
        stored = await self.get_response(response_id)
        if stored is None:
            return None
        return page_of(stored.input_items, lambda item: item["id"], after, limit, order)


def chat_completion_of(row) -> StoredChatCompletion:
    return StoredChatCompletion(**{key: value for key, value in row.items() if key != "seq"})


async def insert_metadata(connection: AsyncConnection, completion_id: str,
                          metadata: dict[str, str] | None) -> None:
    """The rows that `metadata[key]=value` list filters match."""
    if metadata:
        rows = [dict(completion_id=completion_id, key=key, value=value) for key, value in metadata.items()]
        await connection.execute(insert(chat_completion_metadata), rows)


def sqlite_foreign_keys(connection, _record) -> None:
    """SQLite checks foreign keys only when asked, per connection."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
