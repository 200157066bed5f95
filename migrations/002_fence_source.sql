-- 002_fence_source.sql - a fencing token is compared only with tokens of the same source.
--
-- A token is a number from one counter: the Redis lock's `lock:goods:N:fence`, and, in
-- other modes, other lock services' own counters (a ZooKeeper zxid, an etcd revision).
-- Numbers from two counters say nothing about each other: a Redis token near 10^15 would
-- refuse every token of a service that counts from 1, for ever. So the row remembers which
-- source wrote `fence`, and a claim compares its token with the stored one only when the
-- sources match (see DB__STOCK_CLAIM in db/statements.c). NULL: no fenced claim yet.
ALTER TABLE goods ADD COLUMN fence_source text;
