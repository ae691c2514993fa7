"""The schema of a PostgreSQL store: versioned scripts, each migrating it from version i
to i + 1 (``migrate`` applies them under an advisory lock and records each in
``migrations``), and the row-level security that confines a connection bound to a
tenant (``?tenant=``).

``meta`` holds the store-wide state every connection reads: the change and rowid
counters, the store's id, the pinned embedder. What a tenant owns beside its records
(the jobs of ``memlane.Memory.jobs``) lives in ``tenant_meta``, under a policy.
"""

from __future__ import annotations

from typing import Any

from memlane.errors import StorageError
from memlane.records import SCOPE_FIELDS
from memlane.schema import history_table, records_table

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate", "version"]


def _tenant_policy(table: str) -> str:
    """Row-level security on ``table``: a connection that sets memlane.tenant (see
    ?tenant=) sees and writes only the rows whose scope field memlane.tenant_field
    equals it; one that does not set it sees everything."""
    cases = "\n".join(f"            WHEN '{f}' THEN {f}" for f in SCOPE_FIELDS)
    return f"""
    ALTER TABLE {{s}}.{table} ENABLE ROW LEVEL SECURITY;
    CREATE POLICY tenant ON {{s}}.{table} USING (
        coalesce(current_setting('memlane.tenant', true), '') = ''
        OR CASE current_setting('memlane.tenant_field', true)
{cases}
        END = current_setting('memlane.tenant', true)
    );
    """


# Each entry migrates the schema from version i to i + 1; "{s}" is the schema.
MIGRATIONS = (
    """
    CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
    INSERT INTO {s}.meta (key, value) VALUES
        ('seq', '0'), ('next_rowid', '1'), ('forgotten', '0'),
        ('store_id', gen_random_uuid()::text);
    """
    + records_table("postgres", "{s}.records")
    + """;
    CREATE INDEX records_seq ON {s}.records (seq);
    CREATE INDEX records_hash ON {s}.records (content_hash);
    CREATE TABLE {s}.recent (key text PRIMARY KEY, id text NOT NULL, at float8 NOT NULL);
    CREATE INDEX recent_at ON {s}.recent (at);
    CREATE INDEX recent_id ON {s}.recent (id);
    CREATE TABLE {s}.tombstones (
        rowid bigint PRIMARY KEY,
        seq int8 NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX tombstones_seq ON {s}.tombstones (seq);
    """,
    # The policy binds every role but the tables' owner and superusers, so workers
    # confined to a tenant log in as a role of their own.
    _tenant_policy("records"),
    # Supersession and history. A store made by migration 1 of this release has
    # valid_to already; older ones gain it. History entries keep the scope columns,
    # so the tenant policy binds them as it binds the records.
    """
    ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS valid_to float8;
    """
    + history_table("postgres", "{s}.history")
    + """;
    CREATE INDEX history_id ON {s}.history (id);
    CREATE INDEX history_next ON {s}.history (next_id);
    """
    + _tenant_policy("history"),
    # The dedup window's keys hold scope values, message ids and contacts: a tenant
    # sees a key only while it sees the record the key names. (Tombstones hold a
    # rowid and a sequence number, nothing of a record, and every follower replays
    # them, so they stay visible.)
    """
    ALTER TABLE {s}.recent ENABLE ROW LEVEL SECURITY;
    CREATE POLICY tenant ON {s}.recent USING (
        coalesce(current_setting('memlane.tenant', true), '') = ''
        OR EXISTS (SELECT 1 FROM {s}.records r WHERE r.id = recent.id)
    );
    """,
    # Expiry and the second timeline (when the store learned a version). A store made
    # by migration 1 of this release has the columns already. Each version of an
    # older store was learned when first written: its earliest version's updated_at.
    """
    ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS expires_at float8;
    ALTER TABLE {s}.history ADD COLUMN IF NOT EXISTS expires_at float8;
    ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS recorded_at float8;
    ALTER TABLE {s}.history ADD COLUMN IF NOT EXISTS recorded_at float8;
    UPDATE {s}.records r SET recorded_at = coalesce(
        (SELECT min(h.updated_at) FROM {s}.history h WHERE h.id = r.id), r.updated_at)
        WHERE recorded_at IS NULL;
    UPDATE {s}.history h SET recorded_at = coalesce(
        (SELECT min(o.updated_at) FROM {s}.history o WHERE o.id = h.id), h.updated_at)
        WHERE recorded_at IS NULL;
    ALTER TABLE {s}.records ALTER COLUMN recorded_at SET NOT NULL;
    ALTER TABLE {s}.history ALTER COLUMN recorded_at SET NOT NULL;
    CREATE INDEX IF NOT EXISTS records_expires ON {s}.records (expires_at)
        WHERE expires_at IS NOT NULL;
    """,
    # Who said a conversation turn. A store made by migration 1 of this release has
    # the column already; older records are no turns (None).
    """
    ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS speaker text;
    ALTER TABLE {s}.history ADD COLUMN IF NOT EXISTS speaker text;
    """,
    # What a tenant owns beside its records (the jobs of Memory.jobs), apart from the
    # store-wide state in meta: a connection bound to a tenant reads and writes only its
    # own entries (tenant: FIELD:VALUE; '' for a connection bound to none). Jobs kept in
    # meta before had no owner on record: they go to connections bound to no tenant, and
    # the roles that could write them may write this table. (Run again over its own
    # work, it changes nothing.)
    """
    CREATE TABLE IF NOT EXISTS {s}.tenant_meta (
        tenant text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (tenant, key)
    );
    ALTER TABLE {s}.tenant_meta ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS tenant ON {s}.tenant_meta;
    CREATE POLICY tenant ON {s}.tenant_meta USING (
        coalesce(current_setting('memlane.tenant', true), '') = ''
        OR tenant = current_setting('memlane.tenant_field', true) || ':'
            || current_setting('memlane.tenant', true)
    );
    INSERT INTO {s}.tenant_meta (tenant, key, value)
        SELECT '', key, value FROM {s}.meta WHERE left(key, 4) = 'job:'
        ON CONFLICT DO NOTHING;
    DELETE FROM {s}.meta WHERE left(key, 4) = 'job:';
    DO $$
    DECLARE grantee text;
    BEGIN
        FOR grantee IN
            SELECT DISTINCT CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
            FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.oid = '{s}.meta'::regclass AND a.privilege_type = 'UPDATE'
                AND a.grantee <> c.relowner
        LOOP
            EXECUTE 'GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.tenant_meta TO ' || grantee;
        END LOOP;
    END $$;
    """,
    # The change that wrote a history entry, which orders other processes' changes as
    # events (a follower reads the entries of the changes it has not told). A history
    # made by this release has the column already; older entries have none.
    """
    ALTER TABLE {s}.history ADD COLUMN IF NOT EXISTS change_seq int8;
    CREATE INDEX IF NOT EXISTS history_change ON {s}.history (change_seq);
    """,
    # Dedup-window keys an earlier release left behind by deleting their records first:
    # a tenant could neither see nor replace them, so the same key was refused forever.
    """
    DELETE FROM {s}.recent k WHERE NOT EXISTS (SELECT 1 FROM {s}.records r WHERE r.id = k.id);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def version(conn: Any, s: str) -> int:
    """The version the schema ``s`` (quoted) is at; 0 before its first migration."""
    if conn.execute("SELECT to_regclass(%s)", (f"{s}.migrations",)).fetchone() == (None,):
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {s}.migrations").fetchone()
    return int(row[0])


def migrate(conn: Any, s: str, name: str, tenant: bool, location: str) -> int:
    """Brings the schema ``s`` (quoted; ``name`` unquoted) to ``SCHEMA_VERSION`` in one
    transaction, under an advisory lock, so of several processes opening it one migrates
    and the others wait and find it done; returns the version it was at. ``conn`` is an
    autocommit connection of its own, which the caller closes (a failed migration's lock
    goes with it).

    The lock is the session's, taken before the transaction begins: a transaction that
    waited for it inside would read the catalog as it was before the wait, and miss what
    the holder made. Nothing is made that exists already, since CREATE ... IF NOT EXISTS
    needs the right to create even then: a schema made for the owner beforehand is used,
    and a role with only the grants of docs/postgres.md opens a store another migrates.
    A connection bound to a tenant never migrates: it sees the rows its policy lets it
    see, so a data migration run by it would miss the others' and still be done."""
    key = (f"memlane:{name}",)
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", key)
    with conn.transaction():
        done = version(conn, s)
        if done < SCHEMA_VERSION and tenant:
            raise StorageError(
                f"{location} has schema version {done} (this memlane uses {SCHEMA_VERSION}): "
                "open it once without ?tenant=, as the tables' owner, to migrate it"
            )
        if done < SCHEMA_VERSION:
            if conn.execute("SELECT to_regnamespace(%s)", (s,)).fetchone() == (None,):
                conn.execute(f"CREATE SCHEMA {s}")
            if not done:
                conn.execute(
                    f"CREATE TABLE {s}.migrations (version int PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())"
                )
            for v in range(done + 1, SCHEMA_VERSION + 1):
                conn.execute(MIGRATIONS[v - 1].format(s=s).encode())
                conn.execute(f"INSERT INTO {s}.migrations (version) VALUES (%s)", (v,))
    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", key)
    return done


# Which database a connection reached, beyond the store id in ``meta``, which a copy
# (CREATE DATABASE ... TEMPLATE) or a restored dump keeps: the database's and the records
# table's object ids, new for each, and the cluster's system identifier (a restore into
# another cluster), where the role may read it.
#: How long a connection of the store may sit idle inside a transaction before the
#: server ends its session, undoing the transaction. A writer holds the change counter's
#: row lock from its first statement to its commit, so a writer process stopped there
#: (SIGSTOP, a debugger, a frozen VM, a host cut off) would hold every other writer of
#: the store up for good. memlane's transactions wait between statements for one batch's
#: work at most; a re-embedding, which runs the model inside its transaction, lifts it.
IDLE_IN_TRANSACTION_SECONDS = 60


def bound_idle(conn: Any) -> None:
    """Sets ``IDLE_IN_TRANSACTION_SECONDS`` for the session of ``conn``."""
    conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (f"{IDLE_IN_TRANSACTION_SECONDS}s",),
    )


_IDENTITY = (
    "SELECT (SELECT oid FROM pg_database WHERE datname = current_database()), "
    "to_regclass(%s)::oid, has_function_privilege('pg_control_system()', 'EXECUTE')"
)


def database_identity(conn: Any, records: str) -> tuple[int | None, int, int] | None:
    """Which database ``conn`` reached (see ``_IDENTITY``): the cluster's system identifier
    (None where the role may not read it), the database's and the records table's object
    ids; ``records`` names the table (None before the migrations made it)."""
    found = conn.execute(_IDENTITY, (records,)).fetchone()
    if found[1] is None:
        return None
    system = None
    if found[2]:
        system = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]
    return system, int(found[0]), int(found[1])


def same_database(a: tuple[int | None, int, int], b: tuple[int | None, int, int]) -> bool:
    """Whether two identities name one database. A system identifier is compared only
    when both are known: the right to read it may be granted or revoked meanwhile."""
    known = a[0] is not None and b[0] is not None
    return a[1:] == b[1:] and (not known or a[0] == b[0])
