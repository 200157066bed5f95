-- 006_goods_fences.sql - one high-water mark per (goods, source), and each order's source.
--
-- goods.fence and goods.fence_source (002) keep only the last fenced claim's token: a claim
-- under another lock service (etcd between two redis holders, say) replaced them, and the
-- next redis claim was then compared with nothing, so an older redis holder passed and
-- lowered the stored redis fence. Only the goods row's lock kept the books exact. Here each
-- source keeps its own largest token, whatever other sources did in between: a claim compares
-- its token with its own source's row (DB__STOCK_CLAIM). goods.fence and fence_source stay,
-- as the last claim's token and source (what a reader of the row expects to find there).
CREATE TABLE goods_fences (
    goods  bigint NOT NULL REFERENCES goods (id),
    source text   NOT NULL,
    fence  bigint NOT NULL,
    PRIMARY KEY (goods, source)
);
INSERT INTO goods_fences (goods, source, fence)
    SELECT id, fence_source, fence FROM goods WHERE fence_source IS NOT NULL;

-- The source of each order's token (NULL when the order has no token): a token is a number
-- of one counter, and says nothing without it.
ALTER TABLE orders ADD COLUMN fence_source text;
