-- 005_goods_segments.sql - a goods' stock split into segments: the redis-sharded mode.
--
-- One row per (goods, segment). A segment's stock is part of the goods' stock: the goods'
-- total is goods.stock (the part no segment holds) plus the sum of its segments (the stock
-- report adds them: DB__STOCK_REPORT). Each segment is guarded by a Redis lock of its own
-- ("lock:goods:N:seg:K") whose fencing token is stored here, as goods.fence is for the goods'
-- lock: a claim carrying an older token is refused (DB__SEGMENT_CLAIM). The counter of every
-- segment lock is Redis', so no fence_source column is needed.
--
-- Units move between goods.stock and the segments only under pg_advisory_xact_lock(goods)
-- and the rows' locks, so every mode's books stay exact (service/sale/sharded.c explains why).
-- Rows are never deleted: a reset empties them and keeps the fence, as it keeps goods.fence.
CREATE TABLE goods_segments (
    goods bigint  NOT NULL REFERENCES goods (id),
    seg   integer NOT NULL CHECK (seg >= 0 AND seg < 64),
    stock bigint  NOT NULL CHECK (stock >= 0),
    fence bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (goods, seg)
);
