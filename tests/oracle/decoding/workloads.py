"""The decoding oracle's workloads: what a production source throws at logical decoding.

Each workload is ``setup`` (run before cdclake is installed and the slot is created, so its
tables reach the decoder through the install's full dictionary message) and ``steps``
``(session, sql)`` decoded by both the slot and cdclake. Sessions are separate connections in
autocommit mode; explicit BEGIN/COMMIT make transactions, so sessions can interleave.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.oracle.decoding.harness import Step


@dataclass(frozen=True)
class Workload:
    name: str
    steps: tuple[Step, ...]
    setup: tuple[str, ...] = ()
    min_version: int = 15
    tags: frozenset[str] = field(default_factory=frozenset)
    #: server build features the workload needs (see tests/oracle/features.py)
    requires: frozenset[str] = frozenset()


def one(sql: str) -> tuple[Step, ...]:
    return (("a", sql),)


AB_TABLES = (
    "CREATE TABLE tbl_a (id int PRIMARY KEY, name text, data int)",
    "CREATE TABLE tbl_b (id int PRIMARY KEY, name text, data int)",
    "INSERT INTO tbl_a VALUES (1, 'Alice', 100)",
    "INSERT INTO tbl_b VALUES (10, 'Ken', 100)",
)

TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'it''s "odd"');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN shorttext AS varchar(10);
CREATE TABLE types_t (
  id int PRIMARY KEY,
  b bool, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, n numeric, n2 numeric(12,3),
  t text, vc varchar(20), c char(5), nm name, ch "char", by bytea,
  d date, tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval, ts3 timestamp(3),
  u uuid, j json, jb jsonb, ai int[], at text[], a2 int[], af float8[], ad date[],
  e mood, ea mood[], dom posint, dt shorttext,
  ine inet, ci cidr, mac macaddr, mac8 macaddr8, m money, bt bit(4), vb varbit(10), o oid,
  p point, r4 int4range, r8 int8range, nr numrange, dr daterange, tsr tsrange,
  tstzr tstzrange, tsv tsvector, "Weird Col" text, "select" int
);
"""

TYPE_ROWS = [
    # every column null except the key
    "INSERT INTO types_t (id) VALUES (1)",
    """INSERT INTO types_t VALUES (2, true, 32767, 2147483647, 9223372036854775807, 3.4028235e38,
      1.7976931348623157e308, 12345678901234567890.123456789, 123456789.123, 'it''s a "text"\\
      with backslash \\ and
      newline', 'varchar', 'ab', 'name_value', 'x', '\\x00ff10', '2024-02-29', '24:00:00',
      '23:59:59.999999+14:59', '2024-01-01 12:34:56.789012', '2024-06-30 23:59:59.5+02',
      '1 year 2 mons 3 days 04:05:06.7', '2024-01-01 00:00:00.1239',
      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50, null], "b" : "x"}',
      '{"b": {"c": [true, false, null, 1.0, -2e5, "s\\"q"]}, "a": "\\u00e9"}',
      '{1,NULL,3}', '{"a b","c,d","e\\"f",NULL,"NULL",""}', '{{1,2},{3,4}}',
      '{1.5,NaN,-Infinity}', '{2024-01-01,infinity}', 'happy', '{sad,"it''s \\"odd\\""}', 7,
      'short', '192.168.1.5/24', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05',
      -1234.56, B'1010', B'101', 4294967295, '(1.5,-2)', '[1,10)', '(,100]', '[1.5,2.5]',
      '[2024-01-01,infinity)', '["2024-01-01 10:00","2024-01-02 10:00")', 'empty',
      'a:1A fat:2B,4C cat:5D rat', 'weird', 1)""",
    """INSERT INTO types_t (id, b, i2, i4, i8, f4, f8, n, n2, d, tm, ts, tstz, iv, ai, a2)
      VALUES (3, false, -32768, -2147483648, -9223372036854775808, '-0', 'NaN', 'NaN', 'NaN',
      'infinity', '00:00:00', '-infinity', 'infinity', '-1 days -02:03:04', '[0:2]={7,8,9}',
      '[1:1][2:3]={{5,6}}')""",
    """INSERT INTO types_t (id, f4, f8, n, d, ts, tstz, iv, t, c, by, j, jb, at)
      VALUES (4, '1e-45', '4.9e-324', '-0.000000000000000000001', '4713-01-01 BC',
      '0001-01-01 00:00:00 BC', '1999-12-31 23:59:59.999999+00', '00:00:00.000001',
      '', '', '', '[]', '{}', '{}')""",
    """INSERT INTO types_t (id, f4, f8, n, n2, iv, jb)
      VALUES (5, 'Infinity', '-Infinity', 'Infinity', -0.5, '178000000 years', '[1, "2", [3]]')""",
    """INSERT INTO types_t (id, f4, f8, n, i8, jb, t)
      VALUES (6, 0.1, 0.1, 0.1, 0, '"just a string"', repeat('x', 40))""",
    """INSERT INTO types_t (id, f8, n, jb, ine, ci)
      VALUES (7, 1e22, 1e-20, '123.4500', '::ffff:1.2.3.4/128', '2001:db8::/32')""",
    "INSERT INTO types_t (id, f8, n, f4) VALUES (8, 123456789012345680, 10000000000, 1e10)",
    "INSERT INTO types_t (id, f8, f4, n) VALUES (9, 1.5e-5, 100, '-Infinity')",
]


def _types(version: int) -> Workload:
    rows = list(TYPE_ROWS)
    if version >= 17:
        rows.append("INSERT INTO types_t (id, iv) VALUES (10, 'infinity'), (11, '-infinity')")
    steps = [("a", "BEGIN")] + [("a", r) for r in rows] + [("a", "COMMIT")]
    steps += [("a", "UPDATE types_t SET t = 'updated', ai = '{}' WHERE id = 2"),
              ("a", "DELETE FROM types_t WHERE id = 3")]
    return Workload("types", tuple(steps), setup=(TYPES_DDL,))


def workloads(version: int) -> list[Workload]:
    w = [
        Workload("seed_interleaved_840_841", (
            ("t840", "BEGIN"), ("t841", "BEGIN"),
            ("t840", "INSERT INTO tbl_a VALUES (2, 'Bob', 200)"),
            ("t841", "INSERT INTO tbl_a VALUES (3, 'Candy', 3)"),
            ("t840", "INSERT INTO tbl_b VALUES (11, 'Luke', 110)"),
            ("t841", "UPDATE tbl_a SET data = data + 1 WHERE id = 1"),
            ("t841", "UPDATE tbl_a SET data = data + 1 WHERE id = 1"),
            ("t840", "DELETE FROM tbl_b WHERE id = 10"),
            ("t840", "COMMIT"),
            ("t841", "COMMIT"),
        ), setup=AB_TABLES),
        _types(version),
        Workload("toast", one("""
            CREATE TABLE toasty (id int PRIMARY KEY, small text, big text, bin bytea,
                                 other int);
            ALTER TABLE toasty ALTER COLUMN bin SET STORAGE EXTERNAL;
            INSERT INTO toasty VALUES (1, 'a', repeat('compressible ', 5000),
                                       decode(repeat('ab', 3000), 'hex'), 1);
            INSERT INTO toasty SELECT 2, 'b', string_agg(md5(i::text), ''), NULL, 2
              FROM generate_series(1, 500) i;
            INSERT INTO toasty VALUES (3, 'c', repeat('y', 3000), NULL, 3);
            -- issue 33: 22,400 bytes stored as they are, the last of 12 chunks 444 bytes
            INSERT INTO toasty SELECT 5, 'e', string_agg(md5('five' || g), ''), NULL, 5
              FROM generate_series(1, 700) g;
            UPDATE toasty SET other = other + 10;
            UPDATE toasty SET big = big || 'tail' WHERE id = 1;
            UPDATE toasty SET small = 'changed', bin = decode(repeat('cd', 2500), 'hex')
              WHERE id = 2;
            DELETE FROM toasty WHERE id = 3;
            BEGIN;
            INSERT INTO toasty VALUES (4, 'd', repeat('z', 100000), NULL, 4);
            UPDATE toasty SET other = 5 WHERE id = 4;
            COMMIT;""")),
        Workload("xml", one("""
            CREATE TABLE t_xml (id int PRIMARY KEY, x xml, xs xml[]);
            INSERT INTO t_xml VALUES (1, '<a x="1">t&amp;t</a>', '{"<b/>",NULL}'),
                                     (2, 'just text', NULL), (3, NULL, '{}');
            UPDATE t_xml SET x = '<c>changed</c>' WHERE id = 2;"""),
                 requires=frozenset({"libxml"})),
        Workload("toast_lz4_and_full_identity", one("""
            CREATE TABLE t_lz4 (id int PRIMARY KEY, v text COMPRESSION lz4, w text);
            INSERT INTO t_lz4 VALUES (1, repeat('lz4 value ', 3000), 'w');
            INSERT INTO t_lz4 SELECT 2, string_agg(md5(i::text), ''), 'w2'
              FROM generate_series(1, 300) i;
            UPDATE t_lz4 SET w = 'w changed';
            ALTER TABLE t_lz4 REPLICA IDENTITY FULL;
            UPDATE t_lz4 SET w = 'full identity' WHERE id = 1;
            DELETE FROM t_lz4 WHERE id = 2;"""), requires=frozenset({"lz4"})),
        Workload("replica_identities", one("""
            CREATE TABLE ri_default (id int PRIMARY KEY, k2 int, v text);
            CREATE TABLE ri_full (id int, v text);
            ALTER TABLE ri_full REPLICA IDENTITY FULL;
            CREATE TABLE ri_index (a int NOT NULL, b text NOT NULL, v text);
            CREATE UNIQUE INDEX ri_index_ab ON ri_index (b, a);
            ALTER TABLE ri_index REPLICA IDENTITY USING INDEX ri_index_ab;
            CREATE TABLE ri_nothing (id int PRIMARY KEY, v text);
            ALTER TABLE ri_nothing REPLICA IDENTITY NOTHING;
            CREATE TABLE no_key (id int, v text);
            CREATE TABLE composite_pk (a int, b text, v text, PRIMARY KEY (b, a));
            INSERT INTO ri_default VALUES (1, 1, 'x'), (2, 2, 'y');
            INSERT INTO ri_full VALUES (1, 'x'), (1, 'x'), (2, NULL);
            INSERT INTO ri_index VALUES (1, 'one', 'x'), (2, 'two', 'y');
            INSERT INTO ri_nothing VALUES (1, 'x');
            INSERT INTO no_key VALUES (1, 'x');
            INSERT INTO composite_pk VALUES (1, 'k', 'v');
            UPDATE ri_default SET v = 'x2' WHERE id = 1;
            UPDATE ri_default SET id = 10 WHERE id = 2;
            UPDATE ri_full SET v = 'z' WHERE v IS NULL;
            UPDATE ri_index SET v = 'changed' WHERE a = 1;
            UPDATE ri_index SET b = 'uno' WHERE a = 1;
            UPDATE ri_nothing SET v = 'y';
            UPDATE no_key SET v = 'y';
            UPDATE composite_pk SET a = 2, v = 'w';
            DELETE FROM ri_default WHERE id = 10;
            DELETE FROM ri_full WHERE id = 1;
            DELETE FROM ri_index WHERE a = 2;
            DELETE FROM ri_nothing;
            DELETE FROM no_key;
            DELETE FROM composite_pk;""")),
        Workload("subtransactions", one("""
            CREATE TABLE sx (id int PRIMARY KEY, v text);
            BEGIN;
            INSERT INTO sx VALUES (1, 'top');
            SAVEPOINT s1;
            INSERT INTO sx VALUES (2, 'in s1');
            SAVEPOINT s2;
            INSERT INTO sx VALUES (3, 'in s2, rolled back');
            ROLLBACK TO s2;
            INSERT INTO sx VALUES (4, 'in s2 again');
            RELEASE s1;
            UPDATE sx SET v = 'after release' WHERE id = 2;
            SAVEPOINT s3;
            DELETE FROM sx WHERE id = 1;
            ROLLBACK TO s3;
            COMMIT;
            BEGIN;
            SAVEPOINT just_one;
            INSERT INTO sx VALUES (5, 'sub only');
            COMMIT;""")),
        Workload("many_subxacts", one("""
            CREATE TABLE msx (id int PRIMARY KEY);
            CREATE FUNCTION many() RETURNS void LANGUAGE plpgsql AS $$
            BEGIN
              FOR i IN 1..100 LOOP
                BEGIN
                  INSERT INTO msx VALUES (i);
                  IF i % 7 = 0 THEN RAISE EXCEPTION 'roll back %', i; END IF;
                EXCEPTION WHEN raise_exception THEN NULL;
                END;
              END LOOP;
            END $$;
            SELECT many();""")),
        Workload("aborts", (
            ("a", "CREATE TABLE ab (id int PRIMARY KEY, v text)"),
            ("a", "BEGIN"), ("a", "INSERT INTO ab VALUES (1, 'aborted')"),
            ("b", "INSERT INTO ab VALUES (2, 'committed')"),
            ("a", "ROLLBACK"),
            ("a", "BEGIN"), ("a", "INSERT INTO ab VALUES (3, 'x')"),
            ("a", "ALTER TABLE ab ADD COLUMN extra int"), ("a", "ROLLBACK"),
            ("a", "INSERT INTO ab VALUES (4, 'after rolled back DDL')"),
        )),
        Workload("two_phase", (
            ("a", "CREATE TABLE tp (id int PRIMARY KEY, v text)"),
            ("a", "BEGIN"), ("a", "INSERT INTO tp VALUES (1, 'prepared then committed')"),
            ("a", "SAVEPOINT s"), ("a", "INSERT INTO tp VALUES (2, 'sub')"),
            ("a", "PREPARE TRANSACTION 'g1'"),
            ("b", "BEGIN"), ("b", "INSERT INTO tp VALUES (3, 'rolled back prepared')"),
            ("b", "PREPARE TRANSACTION 'g2'"),
            ("c", "INSERT INTO tp VALUES (4, 'plain')"),
            ("c", "COMMIT PREPARED 'g1'"),
            ("c", "ROLLBACK PREPARED 'g2'"),
        )),
        Workload("on_conflict", one("""
            CREATE TABLE oc (id int PRIMARY KEY, v text, n int DEFAULT 0, big text);
            INSERT INTO oc VALUES (1, 'first') ON CONFLICT DO NOTHING;
            INSERT INTO oc VALUES (1, 'again') ON CONFLICT DO NOTHING;
            INSERT INTO oc VALUES (1, 'upsert') ON CONFLICT (id)
              DO UPDATE SET v = excluded.v, n = oc.n + 1;
            INSERT INTO oc VALUES (2, 'new via upsert') ON CONFLICT (id)
              DO UPDATE SET v = excluded.v;
            INSERT INTO oc (id, v, big) VALUES (3, 'toast', repeat(md5('x'), 500))
              ON CONFLICT (id) DO UPDATE SET big = excluded.big;
            INSERT INTO oc (id, v, big) VALUES (3, 'toast2', repeat(md5('y'), 500))
              ON CONFLICT (id) DO UPDATE SET big = excluded.big;
            INSERT INTO oc SELECT g, 'bulk' FROM generate_series(1, 5) g
              ON CONFLICT (id) DO UPDATE SET n = oc.n + 100;""")),
        Workload("copy_and_multi_insert", one("""
            CREATE TABLE cp (id int PRIMARY KEY, v text, t timestamptz);
            COPY cp FROM PROGRAM 'seq 1 2000 | sed ''s/$/\\thello\\t2024-01-01 00:00+00/''';
            CREATE TABLE cp_wide (id int, payload text);
            INSERT INTO cp_wide SELECT g, repeat('w', 900) FROM generate_series(1, 300) g;
            COPY cp_wide FROM PROGRAM 'seq 1 50 | sed ''s/$/\\tpayload/''';""")),
        Workload("truncate", one("""
            CREATE TABLE tr_a (id serial PRIMARY KEY, v text);
            CREATE TABLE tr_b (id int PRIMARY KEY);
            CREATE TABLE tr_child (id int, a_id int REFERENCES tr_a);
            INSERT INTO tr_a (v) VALUES ('x'), ('y');
            INSERT INTO tr_b VALUES (1);
            INSERT INTO tr_child VALUES (1, 1);
            TRUNCATE tr_b;
            TRUNCATE tr_a, tr_b CASCADE;
            INSERT INTO tr_a (v) VALUES ('after');
            TRUNCATE tr_a RESTART IDENTITY CASCADE;
            INSERT INTO tr_a (v) VALUES ('restarted');
            BEGIN;
            TRUNCATE tr_b;
            INSERT INTO tr_b VALUES (2);
            COMMIT;
            CREATE TABLE tr_p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY RANGE (k);
            CREATE TABLE tr_p1 PARTITION OF tr_p FOR VALUES FROM (0) TO (10);
            INSERT INTO tr_p VALUES (1, 1);
            TRUNCATE tr_p;
            INSERT INTO tr_p VALUES (2, 2);""")),
        Workload("add_serial_key_rewrite", one("""
            CREATE TABLE hist_empty (tid int, delta int, mtime timestamp);
            CREATE TABLE hist_full (tid int, delta int);
            INSERT INTO hist_full VALUES (1, 10), (2, 20);
            BEGIN;
            TRUNCATE hist_empty;
            INSERT INTO hist_empty VALUES (0, 0, NULL);
            DELETE FROM hist_empty;
            COMMIT;
            ALTER TABLE hist_empty ADD COLUMN id bigserial PRIMARY KEY;
            ALTER TABLE hist_full ADD COLUMN id bigserial PRIMARY KEY;
            INSERT INTO hist_empty (tid, delta, mtime) VALUES (1, 5, '2024-01-01');
            INSERT INTO hist_full (tid, delta) VALUES (3, 30);
            UPDATE hist_full SET delta = delta + 1 WHERE id = 1;""")),
        Workload("alter_table", one("""
            CREATE TABLE alt (id int PRIMARY KEY, a text, b int, c text);
            INSERT INTO alt VALUES (1, 'a', 1, 'c');
            ALTER TABLE alt ADD COLUMN d int;
            INSERT INTO alt VALUES (2, 'a', 2, 'c', 4);
            ALTER TABLE alt ADD COLUMN e text DEFAULT 'dflt';
            UPDATE alt SET b = b + 1 WHERE id = 1;
            ALTER TABLE alt DROP COLUMN c;
            INSERT INTO alt VALUES (3, 'a', 3, 4, 'e');
            ALTER TABLE alt RENAME COLUMN a TO a_renamed;
            UPDATE alt SET a_renamed = 'z';
            ALTER TABLE alt ALTER COLUMN b TYPE bigint;
            INSERT INTO alt VALUES (4, 'q', 5000000000, NULL, 'e4');
            ALTER TABLE alt RENAME TO alt_renamed;
            CREATE SCHEMA other;
            ALTER TABLE alt_renamed SET SCHEMA other;
            DELETE FROM other.alt_renamed WHERE id = 2;
            BEGIN;
            ALTER TABLE other.alt_renamed ADD COLUMN f int DEFAULT 7;
            INSERT INTO other.alt_renamed (id, a_renamed, f) VALUES (5, 'in ddl txn', 8);
            COMMIT;
            ALTER TABLE other.alt_renamed ADD COLUMN g float8 DEFAULT random();
            UPDATE other.alt_renamed SET f = 9 WHERE id = 1;""")),
        Workload("create_table_as", one("""
            CREATE TABLE src_rows AS SELECT g AS id, 'row ' || g AS v FROM generate_series(1, 5) g;
            SELECT id, v INTO into_rows FROM src_rows WHERE id < 3;
            BEGIN;
            CREATE TABLE in_txn (id int PRIMARY KEY, v text);
            INSERT INTO in_txn VALUES (1, 'created and filled in one transaction');
            COMMIT;""")),
        Workload("vacuum_full_cluster", (
            ("a", "CREATE TABLE vf (id int PRIMARY KEY, v text)"),
            ("a", "INSERT INTO vf SELECT g, 'v' || g FROM generate_series(1, 20) g"),
            ("a", "DELETE FROM vf WHERE id % 2 = 0"),
            ("a", "VACUUM FULL vf"),
            ("a", "INSERT INTO vf VALUES (100, 'after vacuum full')"),
            ("a", "UPDATE vf SET v = 'updated after vacuum full' WHERE id = 1"),
            ("a", "CLUSTER vf USING vf_pkey"),
            ("a", "UPDATE vf SET v = 'after cluster' WHERE id = 3"),
            ("a", "DELETE FROM vf WHERE id = 5"),
            ("a", "VACUUM FULL"),
            ("a", "INSERT INTO vf VALUES (101, 'after database-wide vacuum full')"),
        ), setup=("CREATE TABLE before_install (id int PRIMARY KEY)",)),
        Workload("partitions", one("""
            CREATE TABLE parted (id int, region text, v text, PRIMARY KEY (id, region))
              PARTITION BY LIST (region);
            CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
            CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us');
            INSERT INTO parted VALUES (1, 'eu', 'x'), (2, 'us', 'y');
            UPDATE parted SET region = 'us' WHERE id = 1;
            UPDATE parted SET v = 'z' WHERE id = 2;
            CREATE TABLE parted_asia (id int NOT NULL, region text NOT NULL, v text);
            ALTER TABLE parted ATTACH PARTITION parted_asia FOR VALUES IN ('asia');
            INSERT INTO parted VALUES (3, 'asia', 'attached');
            ALTER TABLE parted DETACH PARTITION parted_eu;
            INSERT INTO parted_eu VALUES (4, 'eu', 'detached');
            DELETE FROM parted WHERE id = 2;""")),
        Workload("unlogged_temp_generated", one("""
            CREATE UNLOGGED TABLE unl (id int PRIMARY KEY, v text);
            CREATE TEMP TABLE tmp (id int PRIMARY KEY, v text);
            CREATE TABLE gen (id int PRIMARY KEY, a int, b int GENERATED ALWAYS AS (a * 2) STORED,
                              ident int GENERATED ALWAYS AS IDENTITY);
            INSERT INTO unl VALUES (1, 'unlogged');
            INSERT INTO tmp VALUES (1, 'temp');
            INSERT INTO gen (id, a) VALUES (1, 21);
            UPDATE gen SET a = 50;
            UPDATE unl SET v = 'still unlogged';
            DELETE FROM gen;""")),
        Workload("messages", (
            ("a", "SELECT pg_logical_emit_message(false, 'nontx', 'outside a transaction')"),
            ("a", "BEGIN"),
            ("a", "SELECT pg_logical_emit_message(true, 'tx', 'inside')"),
            ("a", "SELECT pg_logical_emit_message(false, 'nontx', 'nontx inside a transaction')"),
            ("a", "SELECT pg_logical_emit_message(true, 'tx', 'second, with ''quotes'' and é')"),
            ("a", "COMMIT"),
            ("a", "BEGIN"),
            ("a", "SELECT pg_logical_emit_message(true, 'tx', 'rolled back')"),
            ("a", "ROLLBACK"),
            ("a", "SELECT pg_logical_emit_message(true, 'tx-only', '')"),
        )),
        Workload("concurrent_sessions", (
            ("a", "CREATE TABLE cc (id int PRIMARY KEY, s text, n int)"),
            ("a", "BEGIN"), ("b", "BEGIN"), ("c", "BEGIN"),
            ("a", "INSERT INTO cc VALUES (1, 'a', 0)"),
            ("b", "INSERT INTO cc VALUES (2, 'b', 0)"),
            ("c", "INSERT INTO cc VALUES (3, 'c', 0)"),
            ("b", "SAVEPOINT x"), ("b", "INSERT INTO cc VALUES (4, 'b sub', 0)"),
            ("a", "UPDATE cc SET n = 1 WHERE id = 1"),
            ("c", "COMMIT"),
            ("b", "RELEASE x"),
            ("a", "INSERT INTO cc SELECT g, 'a bulk', g FROM generate_series(10, 40) g"),
            ("b", "COMMIT"),
            ("c", "BEGIN"), ("c", "UPDATE cc SET n = 99 WHERE id = 3"), ("c", "ROLLBACK"),
            ("a", "COMMIT"),
            ("c", "DELETE FROM cc WHERE id > 20"),
        )),
        Workload("other_database_ignored_and_sequences", one("""
            CREATE SEQUENCE sq;
            SELECT nextval('sq');
            CREATE TABLE with_serial (id bigserial PRIMARY KEY, v text);
            INSERT INTO with_serial (v) VALUES ('a'), ('b');
            CREATE MATERIALIZED VIEW mv AS SELECT * FROM with_serial;
            REFRESH MATERIALIZED VIEW mv;
            CREATE UNIQUE INDEX mv_id ON mv (id);
            INSERT INTO with_serial (v) VALUES ('c');
            REFRESH MATERIALIZED VIEW CONCURRENTLY mv;""")),
    ]
    w += type_workloads(version)
    w.append(column_type_changes())
    return [x for x in w if version >= x.min_version]


# -- type-level DDL: the types a table's columns use change while no relation changes ----------

TYPE_DDL_SETUP = (
    """CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    CREATE DOMAIN mood_dom AS mood;
    CREATE DOMAIN posint2 AS int CHECK (VALUE > 0);
    CREATE TYPE pair AS (a int, b text);
    CREATE TYPE kv AS (k int, v int, gone text);
    CREATE TABLE moods (id int PRIMARY KEY, m mood, ma mood[], md mood_dom, mda mood_dom[],
                        n posint2, note text);
    CREATE TABLE pairs OF pair (PRIMARY KEY (a));
    CREATE TABLE kvs OF kv (PRIMARY KEY (k));
    CREATE TABLE holds_pair (id int PRIMARY KEY, p pair);
    CREATE TABLE bystander (id int PRIMARY KEY, v text);
    CREATE SCHEMA other;""",
)


def _type_ddl(version: int) -> Workload:
    """Every type-level DDL, interleaved with rows that use the changed types.

    ``holds_pair`` has a composite column whose type's DDL comes before its first change;
    ``dropper`` one whose type is dropped after its rows (issue 33: a composite stopped every
    table). ``pairs``/``kvs`` are typed tables, whose columns ALTER TYPE ... CASCADE changes
    without any relation DDL being reported.
    """
    steps: list[Step] = [
        ("a", "INSERT INTO moods VALUES (1, 'happy', '{sad,ok}', 'ok', '{happy}', 1, 'first')"),
        ("a", "INSERT INTO pairs VALUES (1, 'one')"),
        ("a", "INSERT INTO kvs VALUES (1, 10, 'x')"),
        # outside a transaction block (the only way before PostgreSQL 12)
        ("a", "ALTER TYPE mood ADD VALUE 'ecstatic'"),
        ("a", "INSERT INTO moods VALUES (2, 'ecstatic', '{ecstatic,sad}', 'ecstatic', "
              "'{ecstatic}', 2, 'new label')"),
        # inside one, with fractional sort orders, next to an unrelated change
        ("a", "BEGIN"),
        ("a", "ALTER TYPE mood ADD VALUE 'meh' BEFORE 'ok'"),
        ("a", "ALTER TYPE mood ADD VALUE IF NOT EXISTS 'glad' AFTER 'happy'"),
        ("a", "ALTER TYPE mood ADD VALUE IF NOT EXISTS 'ok'"),
        ("a", "INSERT INTO bystander VALUES (1, 'in the ADD VALUE transaction')"),
        ("a", "COMMIT"),
        ("a", "UPDATE moods SET m = 'meh', ma = ma || 'glad'::mood WHERE id = 1"),
        ("a", "INSERT INTO moods VALUES (3, 'glad', '{meh,glad,ecstatic}', 'meh', NULL, 3, "
              "'fractional')"),
        # a label renamed between two rows of one transaction; old rows print the new label
        ("a", "BEGIN"),
        ("a", "INSERT INTO moods VALUES (4, 'sad', '{sad}', 'sad', '{sad}', 4, 'before')"),
        ("a", "ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'"),
        ("a", "INSERT INTO moods VALUES (5, 'blue', '{blue}', 'blue', '{blue}', 5, 'after')"),
        ("a", "UPDATE moods SET note = 'old row, renamed label' WHERE id = 1"),
        ("a", "COMMIT"),
        # a rename that commits after a concurrent row using the old label committed
        ("a", "BEGIN"),
        ("a", "ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'"),
        ("b", "INSERT INTO moods VALUES (6, 'ok', '{ok}', 'ok', NULL, 6, 'concurrent')"),
        ("a", "COMMIT"),
        ("a", "UPDATE moods SET note = 'ok is fine now' WHERE id = 6"),
        # the type and the domain renamed and moved: test_decoding prints format_type()
        ("a", "ALTER TYPE mood RENAME TO feeling"),
        ("a", "INSERT INTO moods VALUES (7, 'fine', '{fine,blue}', 'glad', '{meh}', 7, "
              "'renamed type')"),
        ("a", "ALTER TYPE feeling SET SCHEMA other"),
        ("a", "ALTER DOMAIN mood_dom RENAME TO feeling_dom"),
        ("a", "UPDATE moods SET note = 'moved type' WHERE id = 2"),
        ("a", "ALTER DOMAIN feeling_dom SET SCHEMA other"),
        ("a", "INSERT INTO moods VALUES (8, 'ecstatic', NULL, 'fine', '{fine}', 8, "
              "'moved domain')"),
        # domain DDL that changes nothing a row shows, then a rename
        ("a", "ALTER DOMAIN posint2 SET DEFAULT 42"),
        ("a", "ALTER DOMAIN posint2 ADD CONSTRAINT below_1000 CHECK (VALUE < 1000)"),
        ("a", "INSERT INTO moods (id, m, note) VALUES (9, 'glad', 'domain default')"),
        ("a", "ALTER DOMAIN posint2 RENAME TO smallpos"),
        ("a", "ALTER DOMAIN smallpos DROP CONSTRAINT below_1000"),
        ("a", "ALTER DOMAIN smallpos DROP DEFAULT"),
        ("a", "INSERT INTO moods (id, n, note) VALUES (10, 999, 'renamed domain')"),
        # composite types: typed tables follow ALTER TYPE ... CASCADE
        ("a", "ALTER TYPE pair ADD ATTRIBUTE c int CASCADE"),
        ("a", "INSERT INTO pairs VALUES (2, 'two', 22)"),
        ("a", "ALTER TYPE pair RENAME ATTRIBUTE b TO bee CASCADE"),
        ("a", "UPDATE pairs SET bee = 'uno' WHERE a = 1"),
        ("a", "ALTER TYPE pair DROP ATTRIBUTE c CASCADE"),
        ("a", "INSERT INTO pairs VALUES (3, 'three')"),
        ("a", "ALTER TYPE kv ALTER ATTRIBUTE v TYPE bigint CASCADE"),
        ("a", "INSERT INTO kvs VALUES (2, 5000000000, 'big')"),
        ("a", "ALTER TYPE kv DROP ATTRIBUTE gone CASCADE"),
        ("a", "ALTER TYPE kv RENAME TO kv2"),
        ("a", "ALTER TYPE kv2 SET SCHEMA other"),
        ("a", "UPDATE kvs SET v = v + 1"),
        ("a", "INSERT INTO bystander VALUES (2, 'after the composite DDL')"),
        # new types used by new columns
        ("a", "CREATE TYPE color AS ENUM ('red', 'green')"),
        ("a", "ALTER TABLE bystander ADD COLUMN c color"),
        ("a", "INSERT INTO bystander VALUES (3, 'new enum column', 'green')"),
        ("a", "CREATE DOMAIN code AS varchar(4) CHECK (VALUE <> '')"),
        ("a", "ALTER TABLE bystander ADD COLUMN cd code DEFAULT 'dflt', "
              "ADD COLUMN ca color[] DEFAULT '{red}'"),
        ("a", "UPDATE bystander SET v = 'defaults of new types' WHERE id = 1"),
        ("a", "BEGIN"),
        ("a", "CREATE TYPE size AS ENUM ('s')"),
        ("a", "ALTER TYPE size ADD VALUE 'm'"),
        ("a", "ALTER TABLE bystander ADD COLUMN sz size"),
        ("a", "INSERT INTO bystander (id, sz) VALUES (4, 's')"),
    ]
    if version >= 17:  # a label added to a type created in the same transaction is usable
        steps.append(("a", "INSERT INTO bystander (id, sz) VALUES (5, 'm')"))
    steps += [
        ("a", "COMMIT"),
        ("a", "INSERT INTO bystander (id, sz, c) VALUES (6, 'm', 'red')"),
        ("a", "ALTER TYPE color ADD VALUE 'blue' BEFORE 'red'"),
        ("a", "ALTER TYPE color RENAME VALUE 'red' TO 'crimson'"),
        ("a", "UPDATE bystander SET c = 'blue', ca = ca || 'blue'::color WHERE id = 1"),
        ("a", "DELETE FROM bystander WHERE id = 3"),
        ("a", "DELETE FROM moods WHERE id = 4"),
        # a schema renamed: the names of its types and tables, nothing else, change
        ("a", "CREATE TABLE other.far (id int PRIMARY KEY, f other.feeling)"),
        ("a", "INSERT INTO other.far VALUES (1, 'glad')"),
        ("a", "ALTER SCHEMA other RENAME TO elsewhere"),
        ("a", "INSERT INTO elsewhere.far VALUES (2, 'blue')"),
        ("a", "INSERT INTO moods VALUES (11, 'glad', '{glad}', 'glad', '{glad}', 11, "
              "'renamed schema')"),
        ("a", "UPDATE kvs SET v = 0 WHERE k = 1"),
        # dropping a type drops the columns using it, reported by no ALTER TABLE
        ("a", "DROP TYPE color CASCADE"),
        ("a", "INSERT INTO bystander VALUES (7, 'color columns dropped', 'cd07', 'm')"),
        ("a", "UPDATE bystander SET v = 'had a color' WHERE id = 1"),
        ("a", "DROP DOMAIN code CASCADE"),
        ("a", "INSERT INTO bystander VALUES (8, 'code column dropped', 's')"),
        ("a", "DELETE FROM bystander WHERE id = 6"),
        # a composite type created, used and dropped (CASCADE drops its column): the rows
        # written with it print it as they did, those after the drop have no such column
        ("a", "CREATE TYPE gone_t AS (g int, h text)"),
        ("a", "CREATE TABLE dropper (id int PRIMARY KEY, t gone_t, v text)"),
        ("a", "INSERT INTO dropper VALUES (1, ROW(1, 'x y'), 'a'), (2, ROW(2, NULL), 'b')"),
        ("a", "UPDATE dropper SET t = ROW(3, 'w\"q') WHERE id = 1"),
        ("a", "DROP TYPE gone_t CASCADE"),
        ("a", "INSERT INTO dropper VALUES (3, 'after the drop')"),
        ("a", "UPDATE dropper SET v = 'later' WHERE id = 1"),
        # the composite column of a table that had no changes yet (pair altered above)
        ("a", "INSERT INTO holds_pair VALUES (1, ROW(1, 'x y')), (2, NULL)"),
        ("a", "UPDATE holds_pair SET p = ROW(NULL, '') WHERE id = 2"),
    ]
    return Workload("type_ddl", tuple(steps), setup=TYPE_DDL_SETUP)


def _type_rename_mid_transaction() -> Workload:
    """A type renamed between two rows of one transaction: the first still prints the old
    name, as the slot decodes each change with the catalog as of that change."""
    return Workload("type_rename_mid_transaction", (
        ("a", "CREATE TYPE tone AS ENUM ('low', 'high')"),
        ("a", "CREATE DOMAIN tone_d AS tone"),
        ("a", "CREATE TABLE tones (id int PRIMARY KEY, t tone, ta tone[], td tone_d)"),
        ("a", "BEGIN"),
        ("a", "INSERT INTO tones VALUES (1, 'low', '{high}', 'low')"),
        ("a", "ALTER TYPE tone RENAME TO pitch"),
        ("a", "INSERT INTO tones VALUES (2, 'high', '{low}', 'high')"),
        ("a", "ALTER DOMAIN tone_d RENAME TO pitch_d"),
        ("a", "ALTER TYPE pitch RENAME VALUE 'low' TO 'bass'"),
        ("a", "UPDATE tones SET td = 'bass' WHERE id = 1"),
        ("a", "ALTER TYPE pitch SET SCHEMA other"),
        ("a", "DELETE FROM tones WHERE id = 2"),
        ("a", "COMMIT"),
        ("a", "INSERT INTO tones VALUES (3, 'bass', NULL, 'high')"),
    ), setup=("CREATE SCHEMA other",))


# -- column type changes: ALTER COLUMN ... TYPE, rewriting the table or not ------------------

RETYPE_SETUP = (
    """CREATE TYPE light AS ENUM ('red', 'amber', 'green');
    CREATE DOMAIN positive AS int CHECK (VALUE > 0);
    CREATE DOMAIN label AS text;
    CREATE TABLE rw (id int PRIMARY KEY, n text, m int, q int, big int, r real, e light,
                     w varchar(5), s text, tm time, ai int[], flip text);
    CREATE TABLE money_t (id int PRIMARY KEY, rate numeric(10,2), wide numeric(12,2),
                          narrow numeric(12,2));
    CREATE TABLE loose (id int PRIMARY KEY, amount numeric(10,2), at timestamp,
                        back timestamptz, w varchar(5));
    CREATE TABLE loose_key (k numeric(6,2) PRIMARY KEY, v text);
    CREATE TABLE stamps (id int PRIMARY KEY, at timestamp);
    CREATE TABLE keyed (code text PRIMARY KEY, v int);
    CREATE TABLE emptied (id int PRIMARY KEY, n text);""",
)


def column_type_changes() -> Workload:
    """Every kind of column type change PostgreSQL makes: with a table rewrite (``USING``,
    a new representation: text->int, int->text, int->numeric, a numeric's scale, narrowing,
    an array, a domain with a CHECK, enum<->text, timestamp->timestamptz in a zone other than
    UTC, a key column) and without one (binary-coercible or typmod-only: numeric(p,s)->numeric,
    varchar(n)->varchar(m), timestamp<->timestamptz with TimeZone UTC, a domain without a
    constraint), on rows written before it, with changes before and after it in its
    transaction, twice in one transaction, and on a table emptied just before (a rewrite of
    no row writes nothing). Values without a typed representation (NaN in a numeric(p,s),
    24:00:00, a 2-D array) ride through. Everything up to the first ALTER fills the tables."""
    a = "a"
    return Workload("column_type_changes", (
        (a, "INSERT INTO rw SELECT g, g::text, g, g, g, g / 3.0, 'amber', 'w' || g, 's' || g, "
            "'12:00', ARRAY[g, g + 1], 'f' || g FROM generate_series(1, 6) g"),
        (a, "UPDATE rw SET tm = '24:00:00', ai = '{{1,2},{3,4}}' WHERE id = 2"),
        (a, "INSERT INTO money_t VALUES (1, 1.25, 10.5, 99.99), (2, 'NaN', 'NaN', -1), "
            "(3, -0.01, 0, 1234567.89)"),
        (a, "INSERT INTO loose VALUES (1, 1.5, '2024-01-01 10:00', '2024-01-01 10:00+00', 'a'), "
            "(2, 'NaN', '294270-01-01 00:00', '294270-01-01 00:00+00', 'b'), "
            "(3, 0, '1999-12-31 23:59:59.999999', 'infinity', 'c'), (4, -2.25, NULL, NULL, NULL)"),
        (a, "INSERT INTO loose_key VALUES (1.5, 'one and a half'), (2, 'two'), (-3.25, 'neg')"),
        (a, "INSERT INTO stamps VALUES (1, '2024-06-01 12:00'), (2, '-infinity')"),
        (a, "INSERT INTO keyed VALUES ('1', 1), ('2', 2), ('3', 3)"),
        (a, "INSERT INTO emptied VALUES (1, 'x'), (2, 'y')"),
        # the case: text -> int, the rows rewritten; then changes under the new type
        (a, "ALTER TABLE rw ALTER COLUMN n TYPE int USING n::int"),
        (a, "UPDATE rw SET n = n * 100 WHERE id = 1"),
        (a, "INSERT INTO rw (id, n) VALUES (7, 7)"),
        # one ALTER, one rewrite, many columns; changes before and after it in its transaction
        (a, "BEGIN"),
        (a, "UPDATE rw SET m = 50 WHERE id = 2"),
        (a, "ALTER TABLE rw ALTER m TYPE text, ALTER q TYPE numeric(12,2), ALTER big TYPE bigint, "
            "ALTER r TYPE double precision, ALTER e TYPE text, ALTER w TYPE text, "
            "ALTER s TYPE label, ALTER tm TYPE text, ALTER ai TYPE bigint[]"),
        (a, "INSERT INTO rw (id, m, q, big, e, tm, ai) VALUES (8, 'eight', 8.5, 8000000000, "
            "'not a light', '24:00:00', '{{5,6}}')"),
        (a, "UPDATE rw SET q = q + 0.25 WHERE id = 3"),
        (a, "COMMIT"),
        # text -> enum, int -> a domain with a CHECK, int[] -> an array of another type,
        # and a column that changes type twice in one transaction
        (a, "ALTER TABLE rw ALTER e TYPE light USING (CASE WHEN e = 'not a light' THEN 'red' "
            "ELSE e END)::light"),
        (a, "ALTER TABLE rw ALTER big TYPE bigint[] USING ARRAY[big]"),
        (a, "BEGIN"),
        (a, "ALTER TABLE rw ALTER flip TYPE int USING length(flip)"),
        (a, "INSERT INTO rw (id, flip) VALUES (9, 9)"),
        (a, "ALTER TABLE rw ALTER flip TYPE text USING flip::text || '!'"),
        (a, "UPDATE rw SET flip = 'flipped' WHERE id = 1"),
        (a, "COMMIT"),
        (a, "ALTER TABLE rw ALTER m TYPE positive USING length(m)"),
        # numeric: wider precision (no rewrite), another scale (NaN stays exact text),
        # narrower (the rewrite checks every value)
        (a, "ALTER TABLE money_t ALTER wide TYPE numeric(14,2)"),
        (a, "UPDATE money_t SET wide = 123456789012.34 WHERE id = 1"),
        (a, "ALTER TABLE money_t ALTER rate TYPE numeric(10,3)"),
        (a, "ALTER TABLE money_t ALTER narrow TYPE numeric(9,2)"),
        (a, "INSERT INTO money_t VALUES (4, 0.125, 1, 1)"),
        # no rewrite: the stored values are what PostgreSQL reads under the new type
        (a, "SET TimeZone = 'UTC'"),
        (a, "ALTER TABLE loose ALTER amount TYPE numeric, ALTER at TYPE timestamptz, "
            "ALTER back TYPE timestamp, ALTER w TYPE varchar(10)"),
        (a, "UPDATE loose SET amount = amount * 2 WHERE id = 1"),
        (a, "INSERT INTO loose VALUES (5, 1e-20, '2024-01-01 00:00+00', '2024-01-01', "
            "'0123456789')"),
        (a, "ALTER TABLE loose_key ALTER k TYPE numeric"),
        (a, "UPDATE loose_key SET v = 'updated under numeric' WHERE k = 1.5"),
        (a, "DELETE FROM loose_key WHERE k = 2"),
        # timestamp -> timestamptz in another zone: the rewrite shifts every value
        (a, "SET TimeZone = 'Asia/Kolkata'"),
        (a, "ALTER TABLE stamps ALTER at TYPE timestamptz"),
        (a, "SET TimeZone = 'UTC'"),
        (a, "INSERT INTO stamps VALUES (3, '2024-06-01 12:00+00')"),
        # the key column: its rows found by the new type's values afterwards
        (a, "ALTER TABLE keyed ALTER code TYPE int USING code::int"),
        (a, "UPDATE keyed SET v = 20 WHERE code = 2"),
        (a, "UPDATE keyed SET code = 10 WHERE code = 1"),
        (a, "DELETE FROM keyed WHERE code = 3"),
        # a table emptied, then retyped: a rewrite of no row sends nothing
        (a, "DELETE FROM emptied"),
        (a, "ALTER TABLE emptied ALTER n TYPE int USING n::int"),
        (a, "INSERT INTO emptied VALUES (3, 3)"),
    ), setup=RETYPE_SETUP)


def type_workloads(version: int) -> list[Workload]:
    return [_type_ddl(version), _type_rename_mid_transaction()]


#: the session of :func:`owner_truncates` that runs as the tables' owner, a plain LOGIN role
#: (``harness.login_role``); its ``admin`` session is the superuser's
OWNER = "owner"


def owner_truncates() -> tuple[Step, ...]:
    """What a table owner may do to the TRUNCATE triggers ``cdclake source install`` put on
    their tables, then TRUNCATE every way: triggers dropped or disabled (``DISABLE TRIGGER
    ALL``), on a table with out-of-line TOAST values (removed after the TRUNCATE: deletions on
    the new TOAST relfilenode), several tables in one statement beside one that kept its
    trigger, ``RESTART IDENTITY``, a partitioned table, TRUNCATE then changes in one
    transaction, a TRUNCATE rolled back to a savepoint and one released, and one right after
    a checkpoint (its pg_class row then comes with an image of its page); ``bystander`` is
    never truncated. Every step but the checkpoint (``admin``) runs as :data:`OWNER`, who
    creates the tables after the install (their triggers come from its event trigger)."""
    o = OWNER
    big = "string_agg(md5(g::text || 'x' || j::text), '')"  # 3 kB, incompressible
    return (
        (o, "CREATE TABLE ot (id int PRIMARY KEY, v text)"),
        (o, "ALTER TABLE ot ALTER v SET STORAGE EXTERNAL"),
        (o, "CREATE TABLE od (id int PRIMARY KEY, v text)"),
        (o, "CREATE TABLE oi (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text)"),
        (o, "CREATE TABLE op (id int, k int, v text, PRIMARY KEY (id, k)) PARTITION BY RANGE (k)"),
        (o, "CREATE TABLE op_lo PARTITION OF op FOR VALUES FROM (0) TO (10)"),
        (o, "CREATE TABLE op_hi PARTITION OF op FOR VALUES FROM (10) TO (20)"),
        (o, "CREATE TABLE keeps (id int PRIMARY KEY, v text)"),
        (o, "CREATE TABLE bystander (id int PRIMARY KEY, v text)"),
        (o, f"INSERT INTO ot SELECT g, {big} FROM generate_series(1, 3) g, "
            "generate_series(1, 100) j GROUP BY g"),
        (o, "INSERT INTO od SELECT g, 'd' || g FROM generate_series(1, 5) g"),
        (o, "INSERT INTO oi (v) SELECT 'i' || g FROM generate_series(1, 5) g"),
        (o, "INSERT INTO op SELECT g, g, 'p' || g FROM generate_series(1, 19) g"),
        (o, "INSERT INTO keeps SELECT g, 'k' || g FROM generate_series(1, 5) g"),
        (o, "INSERT INTO bystander SELECT g, 'b' || g FROM generate_series(1, 5) g"),
        (o, "DROP TRIGGER cdclake_truncate ON ot"),
        (o, "ALTER TABLE od DISABLE TRIGGER ALL"),
        (o, "DROP TRIGGER cdclake_truncate ON oi"),
        (o, "DROP TRIGGER cdclake_truncate ON op"),
        (o, "DROP TRIGGER cdclake_truncate ON op_lo"),
        (o, "ALTER TABLE op_hi DISABLE TRIGGER ALL"),
        (o, "TRUNCATE ot"),
        (o, f"INSERT INTO ot SELECT g, {big} FROM generate_series(10, 11) g, "
            "generate_series(1, 100) j GROUP BY g"),
        (o, "INSERT INTO ot VALUES (12, 'short')"),
        (o, "UPDATE ot SET v = v || 'changed' WHERE id = 10"),
        (o, "DELETE FROM ot WHERE id = 11"),
        (o, "UPDATE bystander SET v = 'between' WHERE id = 1"),
        (o, "TRUNCATE ot, od, keeps"),
        (o, "INSERT INTO ot VALUES (13, 'after three')"),
        (o, "INSERT INTO od VALUES (13, 'after three')"),
        (o, "INSERT INTO keeps VALUES (13, 'after three')"),
        (o, "TRUNCATE oi RESTART IDENTITY"),
        (o, "INSERT INTO oi (v) VALUES ('restarted')"),
        (o, "TRUNCATE op"),
        (o, "INSERT INTO op VALUES (1, 1, 'low'), (2, 12, 'high')"),
        (o, "BEGIN"),
        (o, "TRUNCATE od"),
        (o, "INSERT INTO od VALUES (20, 'in the truncating transaction')"),
        (o, "UPDATE od SET v = 'updated there too' WHERE id = 20"),
        (o, "COMMIT"),
        (o, "BEGIN"),
        (o, "TRUNCATE ot"),
        (o, "SAVEPOINT s1"),
        (o, "TRUNCATE ot"),
        (o, "INSERT INTO ot VALUES (20, 'rolled back')"),
        (o, "ROLLBACK TO SAVEPOINT s1"),
        (o, "INSERT INTO ot VALUES (21, 'kept')"),
        (o, "SAVEPOINT s2"),
        (o, "TRUNCATE ot"),
        (o, "INSERT INTO ot VALUES (22, 'released')"),
        (o, "RELEASE SAVEPOINT s2"),
        (o, "COMMIT"),
        ("admin", "CHECKPOINT"),
        (o, "TRUNCATE od"),
        (o, "INSERT INTO od VALUES (30, 'after the checkpoint')"),
        (o, "INSERT INTO bystander VALUES (6, 'last')"),
    )
