-- 004_goods_locks.sql - a table whose unique key is a lock: the pg-lockrow rungs.
--
-- "Unique index as a lock": to take the lock of goods N, insert the row N; the primary key
-- lets only one such row exist, so a second taker's insert finds it and waits (polling);
-- to release, delete it. Each is a transaction of its own, so the row is seen by every
-- replica at once (service/guards/guards_lockrow.c; the rungs: service/guards/modes/pg_lockrow*.c).
--
-- `owner` is the holder's random token: a release deletes only its own row.
-- `locked_until` is the lease of pg-lockrow-ttl (NULL for pg-lockrow: no expiry). Without
-- it, a holder that dies between insert and delete leaves its row for ever, and every later
-- taker of that goods times out until someone deletes the row by hand; with it, a taker may
-- delete a row whose time has passed, on PostgreSQL's clock, the one clock every replica
-- shares.
--
-- No foreign key to goods: the lock is taken before the goods is read, and a request for
-- unknown goods takes it (and answers 404) like any other.
CREATE TABLE goods_locks (
    goods        bigint      PRIMARY KEY,
    owner        text        NOT NULL,
    locked_at    timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz
);
