-- 003_goods_version.sql - a version number on each goods row, for the pg-optimistic rung.
--
-- pg-optimistic reads the stock and the version without a lock, and writes
--   UPDATE goods SET stock = $2, version = version + 1 WHERE id = $1 AND version = $3
-- (DB__STOCK_WRITE_VERSIONED in db/statements.c): no row updated means another writer
-- committed since the read, and the transaction runs again.
--
-- That check is only as good as the rule "every change of the stock moves the version on".
-- The other rungs write the stock with statements of their own, and a reset (or a person
-- with psql) may too: a change that left the version alone would let an optimistic writer
-- that read before it overwrite it unseen, a lost update. So the rule is kept here, once, by
-- a trigger, rather than by every statement remembering it: any UPDATE that sets stock or
-- initial gets version = the old version + 1, whatever the statement says. A new row starts
-- at 0.
ALTER TABLE goods ADD COLUMN version bigint NOT NULL DEFAULT 0;

CREATE FUNCTION goods_next_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := OLD.version + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER goods_version BEFORE UPDATE OF stock, initial ON goods
    FOR EACH ROW EXECUTE FUNCTION goods_next_version();
