-- Removes what install.sql added. The WAL keeps the messages already emitted.
DROP EVENT TRIGGER IF EXISTS cdclake_ddl;
DROP EVENT TRIGGER IF EXISTS cdclake_drop;
DO $$
DECLARE t record;
BEGIN
  FOR t IN SELECT tgrelid::regclass AS rel FROM pg_trigger WHERE tgname = 'cdclake_truncate' LOOP
    EXECUTE format('DROP TRIGGER cdclake_truncate ON %s', t.rel);
  END LOOP;
END $$;
DROP SCHEMA IF EXISTS cdclake CASCADE;
