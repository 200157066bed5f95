-- 001_schema.sql - the stock service's tables.
--
-- Run by db_migrate() inside one transaction, so this file holds no BEGIN/COMMIT and
-- nothing that refuses to run in a transaction (CREATE INDEX CONCURRENTLY, VACUUM...).
-- A migration, once applied somewhere, is never edited: a change is a new numbered file.

-- One row per goods. `stock` is what is left; `initial` what the last reset set, so that
-- the stock report can tell units sold from units lost. `fence` is the highest fencing
-- token that has written the row: a write carrying a lower token is refused (see
-- db_stock_claim), which is how a lock holder whose lease ran out is kept from writing.
--
-- stock >= 0 holds even in the unguarded modes: each request writes a value it computed
-- from a stock it saw as large enough. Those modes lose updates and oversell, but they
-- never write a negative number; the check is a last defence, not the lesson.
CREATE TABLE goods (
    id      bigint      PRIMARY KEY CHECK (id > 0),
    stock   bigint      NOT NULL CHECK (stock >= 0),
    initial bigint      NOT NULL CHECK (initial >= 0),
    fence   bigint      NOT NULL DEFAULT 0,
    updated timestamptz NOT NULL DEFAULT now()
);

-- One row per sale. `fence` is the token the writer held (NULL in the unfenced modes), so
-- an order can be traced to the holding that made it.
--
-- The foreign key to goods is kept: an order for goods that do not exist is a bug. The check
-- runs once per order row: next to one sale it is small, but in redis-batch's one INSERT of a
-- batch's orders the checks cost about as much as the rest of that statement (timed with
-- pgbench, the statement alone, 17 rows, the check on and off), and it is kept there too.
-- It locks the goods row FOR KEY SHARE, which does not conflict with the deduction's own
-- UPDATE of stock (that takes FOR NO KEY UPDATE: the key is not changed), so it adds no
-- waiting between requests. Goods are never deleted (a reset deletes the
-- goods' orders, not the goods), so no ON DELETE rule is needed.
CREATE TABLE orders (
    id       bigserial   PRIMARY KEY,
    goods    bigint      NOT NULL REFERENCES goods (id),
    count    integer     NOT NULL CHECK (count > 0),
    mode     text        NOT NULL,
    instance text        NOT NULL,
    fence    bigint,
    created  timestamptz NOT NULL DEFAULT now()
);

-- The stock report sums the orders of one goods, and a reset deletes them: both look
-- orders up by goods. The foreign key needs no other index (goods rows are never deleted).
CREATE INDEX orders_goods_idx ON orders (goods);

-- The first answer given for an Idempotency-Key, per goods. A request claims its key by
-- inserting a row with status 0 (no answer yet) inside its own transaction, and fills in
-- status and body before it commits; a rolled-back request leaves nothing behind.
--
-- No foreign key to goods: a 404 (unknown goods) is an answer that is stored too.
CREATE TABLE idempotency (
    goods   bigint      NOT NULL,
    key     text        NOT NULL CHECK (length(key) BETWEEN 1 AND 128),
    status  integer     NOT NULL DEFAULT 0 CHECK (status = 0 OR status BETWEEN 100 AND 599),
    body    text,
    created timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (goods, key)
);
