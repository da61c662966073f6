"""The store's tables, and bringing a database's schema up to date at start-up.

Migration scheme: `create_all` makes any missing table, and `schema_version` records the
version of the layout the tables follow. At start-up an empty database is stamped with
SCHEMA_VERSION; an older stamp runs the steps in MIGRATIONS from its version up, in one
transaction; a newer stamp (a database written by a later Flint) stops the server rather
than let it misread the rows."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (JSON, BigInteger, Column, Connection, ForeignKey, Integer, MetaData, String, Table,
                        insert, select, text, update)

SCHEMA_VERSION = 2

# PostgreSQL's `json`, not `jsonb`: jsonb cannot hold the character U+0000, and generated
# text may contain it (a byte-level vocabulary has a token for the byte 0). `json` keeps the
# text as written, escapes included.
Json = JSON()

tables = MetaData()

schema_version = Table("schema_version", tables, Column("version", Integer, nullable=False))

chat_completions = Table(
    "chat_completions", tables,
    # Insertion order: breaks ties between completions created in the same second.
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(128), nullable=False, unique=True),
    Column("model", String(256), nullable=False, index=True),
    Column("created_at", BigInteger, nullable=False, index=True),
    Column("metadata", Json, nullable=True),
    Column("request", Json, nullable=False),
    Column("messages", Json, nullable=False),  # the request's messages, each with its own "id"
    Column("completion", Json, nullable=False),
)

# One row per metadata pair, so `metadata[key]=value` filters are plain joins on any
# database (JSON path syntax differs between SQLite and PostgreSQL).
chat_completion_metadata = Table(
    "chat_completion_metadata", tables,
    Column("completion_id", String(128), ForeignKey("chat_completions.id", ondelete="CASCADE"),
           primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("value", String(512), nullable=False, index=True),
)

responses = Table(
    "responses", tables,
    Column("id", String(128), primary_key=True),
    Column("model", String(256), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("metadata", Json, nullable=True),
    Column("request", Json, nullable=False),
    Column("input_items", Json, nullable=False),  # each with its own "id"
    Column("response", Json, nullable=False),
)


def jsonb_to_json(connection: Connection) -> None:
    """Version 1 -> 2: PostgreSQL's payload columns from jsonb to json (SQLite's JSON is text)."""
    if connection.dialect.name != "postgresql":
        return
    for table in tables.sorted_tables:
        for column in table.columns:
            if isinstance(column.type, JSON):
                connection.execute(text(f'ALTER TABLE {table.name} ALTER COLUMN "{column.name}" TYPE json '
                                        f'USING "{column.name}"::json'))


# version -> the step from it to version + 1.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: jsonb_to_json}


class SchemaTooNewError(RuntimeError):
    """The database was written by a later version of Flint."""


def migrate(connection: Connection) -> None:
    """Creates missing tables and brings the schema to SCHEMA_VERSION (run in one transaction)."""
    tables.create_all(connection)
    version = connection.execute(select(schema_version.c.version)).scalar()
    if version is None:
        connection.execute(insert(schema_version).values(version=SCHEMA_VERSION))
        return
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(f"the store's schema is version {version}, newer than this Flint's "
                                f"({SCHEMA_VERSION}); upgrade Flint or use another --store-url")
    for step in range(version, SCHEMA_VERSION):
        MIGRATIONS[step](connection)
    connection.execute(update(schema_version).values(version=SCHEMA_VERSION))
