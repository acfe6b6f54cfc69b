-- cdclake source install: lets a decoder with no catalog access follow the schema from the WAL.
--
-- Heap tuples in WAL carry no schema. These functions describe relations as JSON, and triggers
-- write those descriptions into the WAL with pg_logical_emit_message(true, 'cdclake.ddl', ...)
-- whenever DDL or TRUNCATE changes a table's definition or relfilenode: inside the changing
-- transaction, at its exact LSN, and gone with it if it aborts. Idempotent: run it again to
-- upgrade the functions and emit a fresh full dictionary.
--
-- Nothing here may run code a role that is not a superuser wrote. The triggers run as the
-- installing superuser (SECURITY DEFINER) whoever's DDL fires them, and the owner of a
-- database may create functions and operators in its public schema, in a schema named after
-- any role ("$user"), and temporary ones. PostgreSQL takes an exact match of a function's or
-- operator's argument types from a later schema of the search path over a polymorphic or
-- coercing candidate in pg_catalog (a public.unnest(oid[]) beats pg_catalog.unnest(anyarray)),
-- so every function here:
--   * pins its search path to pg_catalog, pg_temp: functions and operators are looked up in
--     pg_catalog alone (pg_temp is never searched for them), relations and types in pg_catalog
--     first, where one of the same name in pg_temp cannot hide them (unlisted, pg_temp would
--     be searched first for relations and types);
--   * names every function and operator with its schema, pg_catalog.f(...) and
--     OPERATOR(pg_catalog.=), and avoids the syntax that looks an operator up by name on the
--     path (IN lists, NOT IN, NULLIF, LIKE, CASE x WHEN), so even a path another function or
--     session left behind could not choose them;
--   * except cdclake.type_name, which needs a decoding session's path for what it prints and
--     calls nothing but pg_catalog.format_type, by its qualified name.
-- (install.py refuses a cdclake schema owned by a role that is not a superuser, and runs these
-- statements in a session whose own path is pinned the same way.)
CREATE SCHEMA IF NOT EXISTS cdclake;

-- One relation as cdclake.catalog.model.RelationVersion expects it.
CREATE OR REPLACE FUNCTION cdclake.relation_json(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT pg_catalog.jsonb_build_object(
  'oid', c.oid::int8,
  'db_oid', d.oid::int8,
  'tablespace', (CASE WHEN c.reltablespace OPERATOR(pg_catalog.=) 0 THEN d.dattablespace
                 ELSE c.reltablespace END)::int8,
  'relfilenode', COALESCE(pg_catalog.pg_relation_filenode(c.oid)::int8, 0),
  'schema', n.nspname,
  'name', c.relname,
  'qualified', pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.'
               OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname),
  'relkind', c.relkind,
  'persistence', c.relpersistence,
  'replident', c.relreplident,
  'key_attnums', COALESCE((
      SELECT pg_catalog.jsonb_agg(k.attnum ORDER BY k.ord)
      FROM pg_catalog.pg_index i,
           pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid
        AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts
        AND ((c.relreplident OPERATOR(pg_catalog.=) 'd' AND i.indisprimary)
             OR (c.relreplident OPERATOR(pg_catalog.=) 'i' AND i.indisreplident))), '[]'::jsonb),
  'toast_oid', c.reltoastrelid::int8,
  'toast_relfilenode', COALESCE(pg_catalog.pg_relation_filenode(
      CASE WHEN c.reltoastrelid OPERATOR(pg_catalog.<>) 0 THEN c.reltoastrelid END)::int8, 0),
  -- where the pg_class rows are: an UPDATE giving one new storage (TRUNCATE, which no
  -- trigger may report) names the row by its place (cdclake.decoding.walclass)
  'ctid', c.ctid::text,
  'toast_ctid', (SELECT t.ctid::text FROM pg_catalog.pg_class t
                 WHERE t.oid OPERATOR(pg_catalog.=) c.reltoastrelid),
  'parent_oid', COALESCE((SELECT h.inhparent::int8 FROM pg_catalog.pg_inherits h
                          WHERE h.inhrelid OPERATOR(pg_catalog.=) c.oid
                          ORDER BY h.inhseqno LIMIT 1), 0),
  'columns', COALESCE((
      SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
          'attnum', a.attnum,
          'name', a.attname,
          'quoted', pg_catalog.quote_ident(a.attname),
          'type_oid', a.atttypid::int8,
          'typmod', a.atttypmod,
          'attlen', a.attlen,
          'attalign', a.attalign,
          'attbyval', a.attbyval,
          'dropped', a.attisdropped,
          'not_null', a.attnotnull,
          'generated', a.attgenerated,
          'has_missing', a.atthasmissing,
          'missing_text', CASE WHEN a.atthasmissing
                               THEN (a.attmissingval::text::text[])[1] END)
        ORDER BY a.attnum)
      FROM pg_catalog.pg_attribute a
      WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0),
      '[]'::jsonb))
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
CROSS JOIN (SELECT oid, dattablespace FROM pg_catalog.pg_database
            WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) d
WHERE c.oid OPERATOR(pg_catalog.=) rel
$fn$;

-- A type's name as a decoding session prints it: PostgreSQL's test_decoding prints
-- format_type_be() under its session's search path, by default "$user", public, which decides
-- whether a type is shown qualified. This is the one function without a pinned path, and
-- why it is safe: its only call is pg_catalog.format_type, named with its schema (so no
-- function of another schema is a candidate), on an oid and a typed NULL; format_type reads
-- the catalogs and runs no code of any role. pg_temp comes last, as in a decoding session
-- that has no temporary types (first, a trigger's caller could hide a type by a temporary
-- one of the same name).
CREATE OR REPLACE FUNCTION cdclake.type_name(typ oid) RETURNS text
LANGUAGE sql STABLE SET search_path = "$user", public, pg_temp AS $fn$
SELECT pg_catalog.format_type(typ, NULL::pg_catalog.int4)
$fn$;

-- The types of a set of columns, closed over array elements, domain bases, range subtypes and
-- composite attributes.
CREATE OR REPLACE FUNCTION cdclake.types_json(type_oids oid[]) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
WITH RECURSIVE t(oid) AS (
    SELECT DISTINCT u FROM pg_catalog.unnest(type_oids) u WHERE u OPERATOR(pg_catalog.<>) 0
  UNION
    SELECT x.x FROM t
    JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) t.oid
    CROSS JOIN LATERAL (
        VALUES (CASE WHEN ty.typelem OPERATOR(pg_catalog.<>) 0 THEN ty.typelem END),
          (CASE WHEN ty.typbasetype OPERATOR(pg_catalog.<>) 0 THEN ty.typbasetype END),
          ((SELECT r.rngsubtype FROM pg_catalog.pg_range r
            WHERE r.rngtypid OPERATOR(pg_catalog.=) ty.oid)),
          ((SELECT r.rngtypid FROM pg_catalog.pg_range r
            WHERE r.rngmultitypid OPERATOR(pg_catalog.=) ty.oid))
      UNION ALL
        SELECT a.atttypid FROM pg_catalog.pg_attribute a
        WHERE ty.typtype OPERATOR(pg_catalog.=) 'c'
          AND a.attrelid OPERATOR(pg_catalog.=) ty.typrelid
          AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped) x(x)
    WHERE x.x IS NOT NULL
)
SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
    'oid', ty.oid::int8,
    'name', cdclake.type_name(ty.oid),
    'output', p.proname,
    'typlen', ty.typlen,
    'typbyval', ty.typbyval,
    'typalign', ty.typalign,
    'typtype', ty.typtype,
    'typcategory', ty.typcategory,
    'element', ty.typelem::int8,
    'delimiter', ty.typdelim,
    'base', ty.typbasetype::int8,
    'range_subtype', COALESCE(
        (SELECT r.rngsubtype::int8 FROM pg_catalog.pg_range r
         WHERE r.rngtypid OPERATOR(pg_catalog.=) ty.oid),
        (SELECT r.rngtypid::int8 FROM pg_catalog.pg_range r
         WHERE r.rngmultitypid OPERATOR(pg_catalog.=) ty.oid),
        0),
    'enum_labels', COALESCE((SELECT pg_catalog.jsonb_object_agg(e.oid::text, e.enumlabel)
                             FROM pg_catalog.pg_enum e
                             WHERE e.enumtypid OPERATOR(pg_catalog.=) ty.oid), '{}'::jsonb),
    'attributes', COALESCE((
        SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
            'attnum', a.attnum,
            'name', a.attname,
            'quoted', pg_catalog.quote_ident(a.attname),
            'type_oid', a.atttypid::int8,
            'typmod', a.atttypmod,
            'attlen', a.attlen,
            'attalign', a.attalign,
            'attbyval', a.attbyval,
            'dropped', a.attisdropped) ORDER BY a.attnum)
        FROM pg_catalog.pg_attribute a
        WHERE ty.typtype OPERATOR(pg_catalog.=) 'c'
          AND a.attrelid OPERATOR(pg_catalog.=) ty.typrelid
          AND a.attnum OPERATOR(pg_catalog.>) 0), '[]'::jsonb),
    'namespace', ns.nspname) ORDER BY ty.oid), '[]'::jsonb)
FROM t
JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) t.oid
JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) ty.typoutput
JOIN pg_catalog.pg_namespace ns ON ns.oid OPERATOR(pg_catalog.=) ty.typnamespace
$fn$;

-- Relations (and their types) as one cdclake.ddl message payload. ``extra_types`` are the
-- types a type-level DDL command changed, listed as ``changed_types``: the decoder takes their
-- facts as news at this LSN. The other types are only the closure of the relations' columns,
-- which the decoder merely learns if it does not know them yet (a concurrent transaction's
-- message, written before a type change committed but committing after it, must not undo it).
CREATE OR REPLACE FUNCTION cdclake.relations_json(rels oid[], extra_types oid[] DEFAULT '{}')
RETURNS jsonb LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT pg_catalog.jsonb_build_object(
  'kind', 'relations',
  'relations', COALESCE((SELECT pg_catalog.jsonb_agg(cdclake.relation_json(r) ORDER BY r)
                         FROM pg_catalog.unnest(rels) r), '[]'::jsonb),
  'types', cdclake.types_json(
      ARRAY(SELECT a.atttypid FROM pg_catalog.pg_attribute a
            WHERE a.attrelid OPERATOR(pg_catalog.=) ANY (rels)
              AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped)
      OPERATOR(pg_catalog.||) extra_types),
  'changed_types', COALESCE((SELECT pg_catalog.jsonb_agg(DISTINCT u::int8)
                             FROM pg_catalog.unnest(extra_types) u), '[]'::jsonb))
$fn$;

-- Which relations cdclake follows: permanent user tables, partitioned tables, matviews.
CREATE OR REPLACE FUNCTION cdclake.is_followed(rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT EXISTS (
  SELECT 1 FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
  WHERE c.oid OPERATOR(pg_catalog.=) rel
    AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,m}'::"char"[])
    AND c.relpersistence OPERATOR(pg_catalog.=) 'p'
    AND c.oid OPERATOR(pg_catalog.>=) 16384
    AND n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema,cdclake}'::name[])
    AND NOT n.nspname OPERATOR(pg_catalog.~~) 'pg\_toast%'
    AND NOT n.nspname OPERATOR(pg_catalog.~~) 'pg\_temp\_%')
$fn$;

-- The whole dictionary: what a decoder needs to start at this LSN.
CREATE OR REPLACE FUNCTION cdclake.dictionary_json() RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
WITH rels AS (SELECT pg_catalog.array_agg(c.oid ORDER BY c.oid) AS oids
              FROM pg_catalog.pg_class c WHERE cdclake.is_followed(c.oid))
SELECT cdclake.relations_json(COALESCE(rels.oids, '{}'),
         ARRAY(SELECT a.atttypid FROM pg_catalog.pg_attribute a
               WHERE a.attrelid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
                 AND a.attnum OPERATOR(pg_catalog.>) 0))
  OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
    'kind', 'dictionary',
    'server_version_num', pg_catalog.current_setting('server_version_num')::int,
    'db_oid', d.oid::int8,
    'default_tablespace', d.dattablespace::int8,
    'pg_class', cdclake.relation_json('pg_catalog.pg_class'::regclass),
    'catalogs', COALESCE((
        SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(
                 (CASE WHEN c.reltablespace OPERATOR(pg_catalog.=) 0 THEN d.dattablespace
                  ELSE c.reltablespace END)::int8,
                 pg_catalog.pg_relation_filenode(c.oid)::int8, c.relkind) ORDER BY c.oid)
        FROM pg_catalog.pg_class c
        WHERE c.oid OPERATOR(pg_catalog.<) 16384
          AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,t,m}'::"char"[])
          AND pg_catalog.pg_relation_filenode(c.oid) IS NOT NULL), '[]'::jsonb))
FROM rels, (SELECT oid, dattablespace FROM pg_catalog.pg_database
            WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) d
$fn$;

-- The key that signs every message (cdclake.catalog.signing) lives in a file in the data
-- directory, cdclake_ddl.key: "<key> <ipad> <opad>" in hex, the pads being the key xor 0x36...
-- and 0x5c..., HMAC's inner and outer keys. A file, not a table: a table's rows would be in
-- the WAL, which the archive and every logical slot (a publication FOR ALL TABLES) pass on;
-- the file is read by superusers only (mode 0600), survives a crash, and a base backup copies
-- it. install.py writes it once, on the server (the key is in no statement), and keeps it
-- across re-installs (from the decoders' key file when it is gone), so messages already
-- archived stay verifiable.
CREATE OR REPLACE FUNCTION cdclake.key_path() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT pg_catalog.current_setting('data_directory') OPERATOR(pg_catalog.||) '/cdclake_ddl.key'
$fn$;

-- A new key: SHA-512 of eight version-4 UUIDs, which the server draws from its strong random
-- source (122 random bits each), so the key is made where it is kept and sent in no statement.
CREATE OR REPLACE FUNCTION cdclake.new_key() RETURNS bytea
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT pg_catalog.sha512(pg_catalog.string_agg(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
                                               ''::bytea))
FROM pg_catalog.generate_series(1, 8)
$fn$;

-- The key file's line for key ``k``: the key, then its inner and outer pads, in hex.
CREATE OR REPLACE FUNCTION cdclake.key_line(k bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $fn$
SELECT pg_catalog.encode(k, 'hex') OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) ipad
       OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) opad
FROM (SELECT pg_catalog.string_agg(pg_catalog.lpad(pg_catalog.to_hex(b OPERATOR(pg_catalog.#) 54),
                                                   2, '0'), '' ORDER BY i),
             pg_catalog.string_agg(pg_catalog.lpad(pg_catalog.to_hex(b OPERATOR(pg_catalog.#) 92),
                                                   2, '0'), '' ORDER BY i)
      FROM (SELECT i, pg_catalog.get_byte(k, i) FROM pg_catalog.generate_series(
              0, pg_catalog.length(k) OPERATOR(pg_catalog.-) 1) i) bytes(i, b)) p(ipad, opad)
$fn$;

-- Write one signed cdclake.ddl message: "cdclake-hmac-sha256 <xid8> <hmac>\n<payload>", the
-- HMAC-SHA256 of "<xid8>\n<payload>" under the key, xid8 the top-level transaction's id. Only
-- a role that can read the key file can sign, and no other role may call this.
CREATE OR REPLACE FUNCTION cdclake.emit(payload jsonb) RETURNS pg_lsn
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  path text := cdclake.key_path();
  k text[];
  id text := pg_catalog.pg_current_xact_id()::text;
  body bytea := pg_catalog.convert_to(payload::text, 'UTF8');
BEGIN
  -- fail the DDL rather than leave it undescribed
  IF (pg_catalog.pg_stat_file(path, true)).size IS NULL THEN
    RAISE EXCEPTION 'cdclake cannot sign its schema message: % is missing', path
      USING HINT = 'run cdclake source install again (it restores the key)';
  END IF;
  k := pg_catalog.string_to_array(pg_catalog.btrim(pg_catalog.pg_read_file(path), E' \n'), ' ');
  RETURN pg_catalog.pg_logical_emit_message(true, 'cdclake.ddl',
    pg_catalog.convert_to('cdclake-hmac-sha256 ' OPERATOR(pg_catalog.||) id
      OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) pg_catalog.encode(
        pg_catalog.sha256(pg_catalog.decode(k[3], 'hex') OPERATOR(pg_catalog.||) pg_catalog.sha256(
            pg_catalog.decode(k[2], 'hex')
            OPERATOR(pg_catalog.||) pg_catalog.convert_to(id OPERATOR(pg_catalog.||) E'\n', 'UTF8')
            OPERATOR(pg_catalog.||) body)), 'hex')
      OPERATOR(pg_catalog.||) E'\n', 'UTF8') OPERATOR(pg_catalog.||) body);
END
$fn$;
REVOKE ALL ON FUNCTION cdclake.emit(jsonb) FROM PUBLIC;

-- The install horizon: every transaction id below it was assigned before the install's full
-- dictionary message was written (it is read in a statement after that message), so only such
-- a transaction can have changes the stream, which starts at that message, never saw. The
-- initial snapshot waits until none of them is running (cdclake.catalog.snapshot).
CREATE OR REPLACE FUNCTION cdclake.record_install_horizon() RETURNS xid8
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  horizon xid8 := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot());
BEGIN
  EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION cdclake.install_horizon() RETURNS xid8 '
                            'LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS %L',
                            pg_catalog.format('SELECT %L::pg_catalog.xid8', horizon));
  RETURN horizon;
END
$fn$;
REVOKE ALL ON FUNCTION cdclake.record_install_horizon() FROM PUBLIC;

-- Where the install's full dictionary message lies in the WAL: it starts at or after from_lsn
-- (the insert position read in the statement before the one that wrote it) and ends at end_lsn.
-- A new stream starts there: its first batch skips the segments wholly before from_lsn, which
-- hold nothing it decodes, and waits until the segments up to end_lsn are archived
-- (cdclake.spark.plan).
CREATE OR REPLACE FUNCTION cdclake.record_install_message(from_lsn pg_lsn, end_lsn pg_lsn)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION cdclake.install_message('
                            'OUT from_lsn pg_catalog.pg_lsn, OUT end_lsn pg_catalog.pg_lsn) '
                            'LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS %L',
                            pg_catalog.format('SELECT %L::pg_catalog.pg_lsn, %L::pg_catalog.pg_lsn',
                                              from_lsn, end_lsn));
END
$fn$;
REVOKE ALL ON FUNCTION cdclake.record_install_message(pg_lsn, pg_lsn) FROM PUBLIC;

-- A relation and everything that inherits from it (partitions, inheritance children), whose
-- columns an ALTER TABLE on it changes too.
CREATE OR REPLACE FUNCTION cdclake.with_descendants(rels oid[]) RETURNS oid[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
WITH RECURSIVE d(oid) AS (
    SELECT pg_catalog.unnest(rels)
  UNION
    SELECT h.inhrelid FROM pg_catalog.pg_inherits h
    JOIN d ON h.inhparent OPERATOR(pg_catalog.=) d.oid)
SELECT COALESCE(pg_catalog.array_agg(DISTINCT oid), '{}') FROM d
$fn$;

CREATE OR REPLACE FUNCTION cdclake.add_truncate_trigger(rel oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                 WHERE tgrelid OPERATOR(pg_catalog.=) rel
                   AND tgname OPERATOR(pg_catalog.=) 'cdclake_truncate')
     AND (SELECT relkind FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) rel)
         OPERATOR(pg_catalog.=) ANY ('{r,p}'::"char"[]) THEN
    EXECUTE pg_catalog.format('CREATE TRIGGER cdclake_truncate AFTER TRUNCATE ON %s '
                              'FOR EACH STATEMENT EXECUTE FUNCTION cdclake.on_truncate()',
                              rel::regclass);
  END IF;
END
$fn$;
REVOKE ALL ON FUNCTION cdclake.add_truncate_trigger(oid) FROM PUBLIC;

-- AFTER TRUNCATE: the table now has a new relfilenode, which only this trigger sees.
CREATE OR REPLACE FUNCTION cdclake.on_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM cdclake.emit(cdclake.relations_json(ARRAY[TG_RELID]));
  RETURN NULL;
END
$fn$;

-- The types a DDL command changed, as the decoder must learn them: the types it names, the
-- composite types whose attributes it altered (reported as their pg_class row), the row types
-- of the relations it altered when a column uses them, and the array types of all of these,
-- whose format_type() follows a rename or a schema change of their element.
CREATE OR REPLACE FUNCTION cdclake.changed_types(type_oids oid[], rel_oids oid[]) RETURNS oid[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
WITH named(oid) AS (
    SELECT u FROM pg_catalog.unnest(type_oids) u
  UNION
    SELECT k.reltype FROM pg_catalog.pg_class k
    WHERE k.oid OPERATOR(pg_catalog.=) ANY (rel_oids) AND k.reltype OPERATOR(pg_catalog.<>) 0
      AND (k.relkind OPERATOR(pg_catalog.=) 'c' OR EXISTS (
          SELECT 1 FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) k.reltype
          WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::regclass
            AND d.refobjid OPERATOR(pg_catalog.=) ANY (ARRAY[ty.oid, ty.typarray])
            AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
            AND d.objsubid OPERATOR(pg_catalog.>) 0)))
SELECT COALESCE(pg_catalog.array_agg(DISTINCT x ORDER BY x), '{}') FROM (
    SELECT oid FROM named
  UNION
    SELECT ty.typarray FROM named
    JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) named.oid
    WHERE ty.typarray OPERATOR(pg_catalog.<>) 0
) s(x)
$fn$;

-- ddl_command_end: describe every followed relation the command touched, and the types it
-- changed (ALTER TYPE/DOMAIN change no relation, yet what the relations' columns hold prints
-- differently), with the typed tables ALTER TYPE ... CASCADE altered without reporting them.
CREATE OR REPLACE FUNCTION cdclake.on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  touched oid[];
  spaces oid[];
  rels oid[];
  typs oid[];
  r oid;
BEGIN
  SELECT pg_catalog.array_agg(DISTINCT c.objid) INTO touched
  FROM pg_catalog.pg_event_trigger_ddl_commands() c
  WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass;
  -- ALTER SCHEMA ... RENAME renames every relation and type in it, reporting only the schema
  SELECT pg_catalog.array_agg(DISTINCT c.objid) INTO spaces
  FROM pg_catalog.pg_event_trigger_ddl_commands() c
  WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::regclass
    AND c.command_tag OPERATOR(pg_catalog.=) 'ALTER SCHEMA';
  IF spaces IS NOT NULL THEN
    touched := COALESCE(touched, '{}') OPERATOR(pg_catalog.||) ARRAY(
      SELECT k.oid FROM pg_catalog.pg_class k
      WHERE k.relnamespace OPERATOR(pg_catalog.=) ANY (spaces)
        AND k.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,m,c}'::"char"[]));
  END IF;
  SELECT pg_catalog.array_agg(DISTINCT x) INTO rels FROM (
    SELECT CASE
             WHEN k.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,m}'::"char"[]) THEN k.oid
             WHEN k.relkind OPERATOR(pg_catalog.=) ANY ('{i,I}'::"char"[]) THEN (
               SELECT i.indrelid FROM pg_catalog.pg_index i
               WHERE i.indexrelid OPERATOR(pg_catalog.=) k.oid)
             WHEN k.relkind OPERATOR(pg_catalog.=) 't' THEN (
               SELECT o.oid FROM pg_catalog.pg_class o
               WHERE o.reltoastrelid OPERATOR(pg_catalog.=) k.oid)
           END
    FROM pg_catalog.pg_class k WHERE k.oid OPERATOR(pg_catalog.=) ANY (touched)
    UNION ALL
    SELECT o.oid FROM pg_catalog.pg_class k
    JOIN pg_catalog.pg_class o ON o.reloftype OPERATOR(pg_catalog.=) k.reltype
    WHERE k.oid OPERATOR(pg_catalog.=) ANY (touched) AND k.relkind OPERATOR(pg_catalog.=) 'c'
    UNION ALL
    SELECT con.conrelid FROM pg_catalog.pg_event_trigger_ddl_commands() c
    JOIN pg_catalog.pg_constraint con
      ON c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::regclass
     AND con.oid OPERATOR(pg_catalog.=) c.objid
  ) s(x) WHERE x IS NOT NULL AND x OPERATOR(pg_catalog.<>) 0;
  SELECT pg_catalog.array_agg(DISTINCT x) INTO typs FROM (
    SELECT c.objid FROM pg_catalog.pg_event_trigger_ddl_commands() c
    WHERE c.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::regclass
    UNION ALL
    SELECT ty.oid FROM pg_catalog.pg_type ty
    WHERE ty.typnamespace OPERATOR(pg_catalog.=) ANY (spaces)
      AND ty.typrelid OPERATOR(pg_catalog.=) 0 AND ty.typelem OPERATOR(pg_catalog.=) 0
  ) s(x);
  typs := cdclake.changed_types(COALESCE(typs, '{}'), COALESCE(touched, '{}'));
  rels := ARRAY(SELECT o FROM pg_catalog.unnest(cdclake.with_descendants(COALESCE(rels, '{}'))) o
                WHERE cdclake.is_followed(o) ORDER BY o);
  IF pg_catalog.cardinality(rels) OPERATOR(pg_catalog.>) 0
     OR pg_catalog.cardinality(typs) OPERATOR(pg_catalog.>) 0 THEN
    PERFORM cdclake.emit(cdclake.relations_json(rels, typs));
  END IF;
  FOREACH r IN ARRAY rels LOOP
    PERFORM cdclake.add_truncate_trigger(r);
  END LOOP;
END
$fn$;

-- sql_drop: tombstones for dropped relations, tables whose replica identity index went, and
-- tables that lost columns to a DROP of something else (DROP TYPE/DOMAIN/SCHEMA/COLLATION ...
-- CASCADE), which no ddl_command_end reports (ALTER TABLE/TYPE are reported there).
CREATE OR REPLACE FUNCTION cdclake.on_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  dropped jsonb;
  orphaned oid[];
  shrunk oid[];
BEGIN
  IF TG_TAG OPERATOR(pg_catalog.~~) 'DROP %' THEN
    shrunk := ARRAY(
      SELECT DISTINCT o.objid FROM pg_catalog.pg_event_trigger_dropped_objects() o
      WHERE o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
        AND o.objsubid OPERATOR(pg_catalog.>) 0
        AND o.object_type OPERATOR(pg_catalog.=) 'table column' AND cdclake.is_followed(o.objid)
      ORDER BY o.objid);
    IF pg_catalog.cardinality(shrunk) OPERATOR(pg_catalog.>) 0 THEN
      PERFORM cdclake.emit(cdclake.relations_json(shrunk));
    END IF;
  END IF;
  SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('oid', o.objid::int8) ORDER BY o.objid)
  INTO dropped
  FROM pg_catalog.pg_event_trigger_dropped_objects() o
  WHERE o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::regclass
    AND o.objsubid OPERATOR(pg_catalog.=) 0
    AND o.object_type OPERATOR(pg_catalog.=) ANY ('{table,"materialized view"}'::text[]);
  IF dropped IS NOT NULL THEN
    PERFORM cdclake.emit(pg_catalog.jsonb_build_object('kind', 'drop', 'relations', dropped));
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger_dropped_objects() o
             WHERE o.object_type OPERATOR(pg_catalog.=) ANY ('{index,"table constraint"}'::text[]))
  THEN
    orphaned := ARRAY(
      SELECT c.oid FROM pg_catalog.pg_class c
      WHERE c.relreplident OPERATOR(pg_catalog.=) 'i' AND cdclake.is_followed(c.oid)
        AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                        WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisreplident));
    IF pg_catalog.cardinality(orphaned) OPERATOR(pg_catalog.>) 0 THEN
      PERFORM cdclake.emit(cdclake.relations_json(orphaned));
    END IF;
  END IF;
END
$fn$;

-- TRUNCATE triggers on the tables that exist now (new ones get theirs from on_ddl).
SELECT cdclake.add_truncate_trigger(c.oid) FROM pg_catalog.pg_class c
WHERE cdclake.is_followed(c.oid);

DROP EVENT TRIGGER IF EXISTS cdclake_ddl;
CREATE EVENT TRIGGER cdclake_ddl ON ddl_command_end EXECUTE FUNCTION cdclake.on_ddl();
DROP EVENT TRIGGER IF EXISTS cdclake_drop;
CREATE EVENT TRIGGER cdclake_drop ON sql_drop EXECUTE FUNCTION cdclake.on_drop();
