-- cdclake source install: lets a decoder with no catalog access follow the schema from the WAL.
--
-- Heap tuples in WAL carry no schema. These functions describe relations as JSON, and triggers
-- write those descriptions into the WAL with pg_logical_emit_message(true, 'cdclake.ddl', ...)
-- whenever DDL or TRUNCATE changes a table's definition or relfilenode: inside the changing
-- transaction, at its exact LSN, and gone with it if it aborts. Idempotent: run it again to
-- upgrade the functions and emit a fresh full dictionary.

-- Every function pins its search path with pg_temp last: unlisted, pg_temp is searched first
-- for tables, so a temporary table could shadow a catalog inside a SECURITY DEFINER function.
-- (install.py refuses a cdclake schema owned by a role that is not a superuser.)
CREATE SCHEMA IF NOT EXISTS cdclake;

-- One relation as cdclake.catalog.model.RelationVersion expects it.
CREATE OR REPLACE FUNCTION cdclake.relation_json(rel oid) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT jsonb_build_object(
  'oid', c.oid::int8,
  'db_oid', d.oid::int8,
  'tablespace', (CASE WHEN c.reltablespace = 0 THEN d.dattablespace
                 ELSE c.reltablespace END)::int8,
  'relfilenode', COALESCE(pg_relation_filenode(c.oid)::int8, 0),
  'schema', n.nspname,
  'name', c.relname,
  'qualified', quote_ident(n.nspname) || '.' || quote_ident(c.relname),
  'relkind', c.relkind,
  'persistence', c.relpersistence,
  'replident', c.relreplident,
  'key_attnums', COALESCE((
      SELECT jsonb_agg(k.attnum ORDER BY k.ord)
      FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      WHERE i.indrelid = c.oid AND k.ord <= i.indnkeyatts
        AND ((c.relreplident = 'd' AND i.indisprimary)
             OR (c.relreplident = 'i' AND i.indisreplident))), '[]'::jsonb),
  'toast_oid', c.reltoastrelid::int8,
  'toast_relfilenode', COALESCE(pg_relation_filenode(NULLIF(c.reltoastrelid, 0))::int8, 0),
  -- where the pg_class rows are: an UPDATE giving one new storage (TRUNCATE, which no
  -- trigger may report) names the row by its place (cdclake.decoding.walclass)
  'ctid', c.ctid::text,
  'toast_ctid', (SELECT t.ctid::text FROM pg_class t WHERE t.oid = c.reltoastrelid),
  'parent_oid', COALESCE((SELECT h.inhparent::int8 FROM pg_inherits h
                          WHERE h.inhrelid = c.oid ORDER BY h.inhseqno LIMIT 1), 0),
  'columns', COALESCE((
      SELECT jsonb_agg(jsonb_build_object(
          'attnum', a.attnum,
          'name', a.attname,
          'quoted', quote_ident(a.attname),
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
      FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0), '[]'::jsonb))
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN (SELECT oid, dattablespace FROM pg_database WHERE datname = current_database()) d
WHERE c.oid = rel
$fn$;

-- The types of a set of columns, closed over array elements, domain bases, range subtypes and
-- composite attributes. format_type() runs under the search path a decoding session has by
-- default, as PostgreSQL's test_decoding prints format_type_be() under its session's path.
CREATE OR REPLACE FUNCTION cdclake.types_json(type_oids oid[]) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = "$user", public, pg_temp AS $fn$
WITH RECURSIVE t(oid) AS (
    SELECT DISTINCT u FROM unnest(type_oids) u WHERE u <> 0
  UNION
    SELECT x.x FROM t
    JOIN pg_catalog.pg_type ty ON ty.oid = t.oid
    CROSS JOIN LATERAL (
        VALUES (NULLIF(ty.typelem, 0)), (NULLIF(ty.typbasetype, 0)),
          ((SELECT r.rngsubtype FROM pg_catalog.pg_range r WHERE r.rngtypid = ty.oid)),
          ((SELECT r.rngtypid FROM pg_catalog.pg_range r WHERE r.rngmultitypid = ty.oid))
      UNION ALL
        SELECT a.atttypid FROM pg_catalog.pg_attribute a
        WHERE ty.typtype = 'c' AND a.attrelid = ty.typrelid AND a.attnum > 0
          AND NOT a.attisdropped) x(x)
    WHERE x.x IS NOT NULL
)
SELECT COALESCE(jsonb_agg(jsonb_build_object(
    'oid', ty.oid::int8,
    'name', pg_catalog.format_type(ty.oid, NULL),
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
        (SELECT r.rngsubtype::int8 FROM pg_catalog.pg_range r WHERE r.rngtypid = ty.oid),
        (SELECT r.rngtypid::int8 FROM pg_catalog.pg_range r WHERE r.rngmultitypid = ty.oid),
        0),
    'enum_labels', COALESCE((SELECT jsonb_object_agg(e.oid::text, e.enumlabel)
                             FROM pg_catalog.pg_enum e WHERE e.enumtypid = ty.oid), '{}'::jsonb),
    'attributes', COALESCE((
        SELECT jsonb_agg(jsonb_build_object(
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
        WHERE ty.typtype = 'c' AND a.attrelid = ty.typrelid AND a.attnum > 0), '[]'::jsonb),
    'namespace', ns.nspname) ORDER BY ty.oid), '[]'::jsonb)
FROM t
JOIN pg_catalog.pg_type ty ON ty.oid = t.oid
JOIN pg_catalog.pg_proc p ON p.oid = ty.typoutput
JOIN pg_catalog.pg_namespace ns ON ns.oid = ty.typnamespace
$fn$;

-- Relations (and their types) as one cdclake.ddl message payload. ``extra_types`` are the
-- types a type-level DDL command changed, listed as ``changed_types``: the decoder takes their
-- facts as news at this LSN. The other types are only the closure of the relations' columns,
-- which the decoder merely learns if it does not know them yet (a concurrent transaction's
-- message, written before a type change committed but committing after it, must not undo it).
CREATE OR REPLACE FUNCTION cdclake.relations_json(rels oid[], extra_types oid[] DEFAULT '{}')
RETURNS jsonb LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT jsonb_build_object(
  'kind', 'relations',
  'relations', COALESCE((SELECT jsonb_agg(cdclake.relation_json(r) ORDER BY r)
                         FROM unnest(rels) r), '[]'::jsonb),
  'types', cdclake.types_json(
      ARRAY(SELECT a.atttypid FROM pg_attribute a
            WHERE a.attrelid = ANY (rels) AND a.attnum > 0 AND NOT a.attisdropped)
      || extra_types),
  'changed_types', COALESCE((SELECT jsonb_agg(DISTINCT u::int8) FROM unnest(extra_types) u),
                            '[]'::jsonb))
$fn$;

-- Which relations cdclake follows: permanent user tables, partitioned tables, matviews.
CREATE OR REPLACE FUNCTION cdclake.is_followed(rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT EXISTS (
  SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.oid = rel AND c.relkind IN ('r', 'p', 'm') AND c.relpersistence = 'p'
    AND c.oid >= 16384
    AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'cdclake')
    AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%')
$fn$;

-- The whole dictionary: what a decoder needs to start at this LSN.
CREATE OR REPLACE FUNCTION cdclake.dictionary_json() RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
WITH rels AS (SELECT array_agg(c.oid ORDER BY c.oid) AS oids FROM pg_class c
              WHERE cdclake.is_followed(c.oid))
SELECT cdclake.relations_json(COALESCE(rels.oids, '{}'),
         ARRAY(SELECT a.atttypid FROM pg_attribute a
               WHERE a.attrelid = 'pg_catalog.pg_class'::regclass AND a.attnum > 0))
  || jsonb_build_object(
    'kind', 'dictionary',
    'server_version_num', current_setting('server_version_num')::int,
    'db_oid', d.oid::int8,
    'default_tablespace', d.dattablespace::int8,
    'pg_class', cdclake.relation_json('pg_catalog.pg_class'::regclass),
    'catalogs', COALESCE((
        SELECT jsonb_agg(jsonb_build_array(
                 (CASE WHEN c.reltablespace = 0 THEN d.dattablespace
                  ELSE c.reltablespace END)::int8,
                 pg_relation_filenode(c.oid)::int8, c.relkind) ORDER BY c.oid)
        FROM pg_class c
        WHERE c.oid < 16384 AND c.relkind IN ('r', 't', 'm')
          AND pg_relation_filenode(c.oid) IS NOT NULL), '[]'::jsonb))
FROM rels, (SELECT oid, dattablespace FROM pg_database WHERE datname = current_database()) d
$fn$;

-- The key that signs every message (cdclake.catalog.signing) lives in a file in the data
-- directory, cdclake_ddl.key: "<key> <ipad> <opad>" in hex, the pads being the key xor 0x36...
-- and 0x5c..., HMAC's inner and outer keys. A file, not a table: a table's rows would be in
-- the WAL, which the archive and every logical slot (a publication FOR ALL TABLES) pass on;
-- the file is read by superusers only, survives a crash, and a base backup copies it.
-- install.py writes it once and keeps it across re-installs (from the decoders' key file
-- when it is gone), so messages already archived stay verifiable.
CREATE OR REPLACE FUNCTION cdclake.key_path() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
SELECT current_setting('data_directory') || '/cdclake_ddl.key'
$fn$;

-- Write one signed cdclake.ddl message: "cdclake-hmac-sha256 <xid8> <hmac>\n<payload>", the
-- HMAC-SHA256 of "<xid8>\n<payload>" under the key, xid8 the top-level transaction's id. Only
-- a role that can read the key file can sign, and no other role may call this.
CREATE OR REPLACE FUNCTION cdclake.emit(payload jsonb) RETURNS pg_lsn
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  path text := cdclake.key_path();
  k text[];
  id text := pg_current_xact_id()::text;
  body bytea := convert_to(payload::text, 'UTF8');
BEGIN
  IF (pg_stat_file(path, true)).size IS NULL THEN  -- fail the DDL rather than leave it undescribed
    RAISE EXCEPTION 'cdclake cannot sign its schema message: % is missing', path
      USING HINT = 'run cdclake source install again (it restores the key)';
  END IF;
  k := string_to_array(btrim(pg_read_file(path), E' \n'), ' ');
  RETURN pg_logical_emit_message(true, 'cdclake.ddl',
    convert_to('cdclake-hmac-sha256 ' || id || ' ' || encode(
      sha256(decode(k[3], 'hex') || sha256(decode(k[2], 'hex')
                                          || convert_to(id || E'\n', 'UTF8') || body)), 'hex')
      || E'\n', 'UTF8') || body);
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
  horizon xid8 := pg_snapshot_xmax(pg_current_snapshot());
BEGIN
  EXECUTE format('CREATE OR REPLACE FUNCTION cdclake.install_horizon() RETURNS xid8 '
                 'LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS %L',
                 format('SELECT %L::xid8', horizon));
  RETURN horizon;
END
$fn$;

-- A relation and everything that inherits from it (partitions, inheritance children), whose
-- columns an ALTER TABLE on it changes too.
CREATE OR REPLACE FUNCTION cdclake.with_descendants(rels oid[]) RETURNS oid[]
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
WITH RECURSIVE d(oid) AS (
    SELECT unnest(rels)
  UNION
    SELECT h.inhrelid FROM pg_inherits h JOIN d ON h.inhparent = d.oid)
SELECT COALESCE(array_agg(DISTINCT oid), '{}') FROM d
$fn$;

CREATE OR REPLACE FUNCTION cdclake.add_truncate_trigger(rel oid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = rel AND tgname = 'cdclake_truncate')
     AND (SELECT relkind FROM pg_class WHERE oid = rel) IN ('r', 'p') THEN
    EXECUTE format('CREATE TRIGGER cdclake_truncate AFTER TRUNCATE ON %s '
                   'FOR EACH STATEMENT EXECUTE FUNCTION cdclake.on_truncate()', rel::regclass);
  END IF;
END
$fn$;

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
    SELECT u FROM unnest(type_oids) u
  UNION
    SELECT k.reltype FROM pg_class k
    WHERE k.oid = ANY (rel_oids) AND k.reltype <> 0
      AND (k.relkind = 'c' OR EXISTS (
          SELECT 1 FROM pg_depend d JOIN pg_type ty ON ty.oid = k.reltype
          WHERE d.refclassid = 'pg_type'::regclass AND d.refobjid IN (ty.oid, ty.typarray)
            AND d.classid = 'pg_class'::regclass AND d.objsubid > 0)))
SELECT COALESCE(array_agg(DISTINCT x ORDER BY x), '{}') FROM (
    SELECT oid FROM named
  UNION
    SELECT ty.typarray FROM named JOIN pg_type ty ON ty.oid = named.oid WHERE ty.typarray <> 0
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
  SELECT array_agg(DISTINCT c.objid) INTO touched FROM pg_event_trigger_ddl_commands() c
  WHERE c.classid = 'pg_class'::regclass;
  -- ALTER SCHEMA ... RENAME renames every relation and type in it, reporting only the schema
  SELECT array_agg(DISTINCT c.objid) INTO spaces FROM pg_event_trigger_ddl_commands() c
  WHERE c.classid = 'pg_namespace'::regclass AND c.command_tag = 'ALTER SCHEMA';
  IF spaces IS NOT NULL THEN
    touched := COALESCE(touched, '{}') || ARRAY(
      SELECT k.oid FROM pg_class k WHERE k.relnamespace = ANY (spaces)
        AND k.relkind IN ('r', 'p', 'm', 'c'));
  END IF;
  SELECT array_agg(DISTINCT x) INTO rels FROM (
    SELECT CASE
             WHEN k.relkind IN ('r', 'p', 'm') THEN k.oid
             WHEN k.relkind IN ('i', 'I') THEN (SELECT i.indrelid FROM pg_index i
                                                WHERE i.indexrelid = k.oid)
             WHEN k.relkind = 't' THEN (SELECT o.oid FROM pg_class o
                                        WHERE o.reltoastrelid = k.oid)
           END
    FROM pg_class k WHERE k.oid = ANY (touched)
    UNION ALL
    SELECT o.oid FROM pg_class k JOIN pg_class o ON o.reloftype = k.reltype
    WHERE k.oid = ANY (touched) AND k.relkind = 'c'
    UNION ALL
    SELECT con.conrelid FROM pg_event_trigger_ddl_commands() c
    JOIN pg_constraint con ON c.classid = 'pg_constraint'::regclass AND con.oid = c.objid
  ) s(x) WHERE x IS NOT NULL AND x <> 0;
  SELECT array_agg(DISTINCT x) INTO typs FROM (
    SELECT c.objid FROM pg_event_trigger_ddl_commands() c
    WHERE c.classid = 'pg_type'::regclass
    UNION ALL
    SELECT ty.oid FROM pg_type ty
    WHERE ty.typnamespace = ANY (spaces) AND ty.typrelid = 0 AND ty.typelem = 0
  ) s(x);
  typs := cdclake.changed_types(COALESCE(typs, '{}'), COALESCE(touched, '{}'));
  rels := ARRAY(SELECT o FROM unnest(cdclake.with_descendants(COALESCE(rels, '{}'))) o
                WHERE cdclake.is_followed(o) ORDER BY o);
  IF cardinality(rels) > 0 OR cardinality(typs) > 0 THEN
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
  IF TG_TAG LIKE 'DROP %' THEN
    shrunk := ARRAY(
      SELECT DISTINCT o.objid FROM pg_event_trigger_dropped_objects() o
      WHERE o.classid = 'pg_class'::regclass AND o.objsubid > 0
        AND o.object_type = 'table column' AND cdclake.is_followed(o.objid)
      ORDER BY o.objid);
    IF cardinality(shrunk) > 0 THEN
      PERFORM cdclake.emit(cdclake.relations_json(shrunk));
    END IF;
  END IF;
  SELECT jsonb_agg(jsonb_build_object('oid', o.objid::int8) ORDER BY o.objid) INTO dropped
  FROM pg_event_trigger_dropped_objects() o
  WHERE o.classid = 'pg_class'::regclass AND o.objsubid = 0
    AND o.object_type IN ('table', 'materialized view');
  IF dropped IS NOT NULL THEN
    PERFORM cdclake.emit(jsonb_build_object('kind', 'drop', 'relations', dropped));
  END IF;
  IF EXISTS (SELECT 1 FROM pg_event_trigger_dropped_objects() o
             WHERE o.object_type IN ('index', 'table constraint')) THEN
    orphaned := ARRAY(
      SELECT c.oid FROM pg_class c
      WHERE c.relreplident = 'i' AND cdclake.is_followed(c.oid)
        AND NOT EXISTS (SELECT 1 FROM pg_index i
                        WHERE i.indrelid = c.oid AND i.indisreplident));
    IF cardinality(orphaned) > 0 THEN
      PERFORM cdclake.emit(cdclake.relations_json(orphaned));
    END IF;
  END IF;
END
$fn$;

-- TRUNCATE triggers on the tables that exist now (new ones get theirs from on_ddl).
SELECT cdclake.add_truncate_trigger(c.oid) FROM pg_class c WHERE cdclake.is_followed(c.oid);

DROP EVENT TRIGGER IF EXISTS cdclake_ddl;
CREATE EVENT TRIGGER cdclake_ddl ON ddl_command_end EXECUTE FUNCTION cdclake.on_ddl();
DROP EVENT TRIGGER IF EXISTS cdclake_drop;
CREATE EVENT TRIGGER cdclake_drop ON sql_drop EXECUTE FUNCTION cdclake.on_drop();
