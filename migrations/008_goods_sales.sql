-- 008_goods_sales.sql - each goods' units sold and orders as counters: a stock report that
-- does not grow with the orders.
--
-- The report's `sold` and `orders` used to be sum(count) and count(*) over every order of
-- the goods, on every read: a read cost what the run had sold so far (80 ms at 10^6 orders),
-- and the live page reads five times a second. Here they are kept as counters, moved in the
-- same transaction as the orders they count, so a report reads a handful of rows and is
-- exactly as right as the sum: a sale's order and its counts commit, or roll back, together.
--
-- Striped: one goods has up to 16 rows, one per stripe, and a transaction adds to the stripe
-- of its own PostgreSQL backend (pg_backend_pid() % 16). One row per goods would be a hot row:
-- every sale of the goods would wait for the previous sale's commit on it, including the
-- sales that nothing else serialises (redis-sharded's segments, the unguarded modes' inserts).
-- A report sums the stripes (DB__STOCK_REPORT).
--
-- Added by a trigger on orders, not by the statements that insert orders: whatever inserts
-- orders (a sale, a batch, a cart, SQL typed by hand) moves the counters, and no insert can
-- forget them. It runs once per statement with the statement's rows (a transition table): a
-- batch's thousand orders are one upsert per goods.
--
-- Emptied by the reset, in its transaction (DB__SALES_DELETE), not by a trigger on DELETE: a
-- DELETE trigger that reads the deleted rows makes PostgreSQL keep a copy of each, which made
-- the reset of a goods with 10^6 orders 1.5 s (about 30%) slower. The reset holds the goods
-- row and every segment while it deletes (db_goods_reset), so no sale of the goods commits in
-- between and emptying the counters is exact. Any other change to orders (a DELETE or an
-- UPDATE typed by hand) is not followed: the audit below shows it.
--
-- The full ledger stays the truth: GET /api/stock/N?audit=1 reads the counters and the sums
-- over orders in one snapshot (DB__STOCK_AUDIT), and the load tools fail a row whose two
-- disagree (loadtest/lib/audit.sh).
--
-- No foreign key to goods: a row is only ever added for an order, and orders have one.
CREATE TABLE goods_sales (
    goods  bigint  NOT NULL,
    stripe integer NOT NULL CHECK (stripe >= 0 AND stripe < 16),
    sold   bigint  NOT NULL,
    orders bigint  NOT NULL,
    PRIMARY KEY (goods, stripe)
);

-- The goods in ascending order: a statement with orders of several goods takes their stripes
-- in one order, so two of them never wait for each other in a cycle.
CREATE FUNCTION goods_sales_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO goods_sales AS s (goods, stripe, sold, orders)
    SELECT n.goods, pg_backend_pid() % 16, sum(n.count), count(*)
    FROM added_orders n GROUP BY n.goods ORDER BY n.goods
    ON CONFLICT (goods, stripe) DO UPDATE
        SET sold = s.sold + EXCLUDED.sold, orders = s.orders + EXCLUDED.orders;
    RETURN NULL;
END
$$;

-- TRUNCATE has no rows to hand a trigger: it empties the counters with the orders.
CREATE FUNCTION goods_sales_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM goods_sales;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_count_added AFTER INSERT ON orders
    REFERENCING NEW TABLE AS added_orders
    FOR EACH STATEMENT EXECUTE FUNCTION goods_sales_add();
CREATE TRIGGER orders_count_cleared AFTER TRUNCATE ON orders
    FOR EACH STATEMENT EXECUTE FUNCTION goods_sales_clear();

-- The orders already there when this runs, in stripe 0.
INSERT INTO goods_sales (goods, stripe, sold, orders)
SELECT goods, 0, sum(count), count(*) FROM orders GROUP BY goods;
