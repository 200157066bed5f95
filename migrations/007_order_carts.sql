-- 007_order_carts.sql - orders of several goods (POST /api/order), sold all or nothing.
--
-- A cart is recorded as one orders row per item, as a single sale is, so that each goods'
-- books (the stock report: sold, orders, oversold) stay exact whatever sold it. The rows of
-- one cart share `cart`, the number the answer gives as its order_id (taken from the orders'
-- own sequence, so that it is never the id of another order), and each says how many items
-- its cart has (`cart_items`). Every row of a cart is written by one statement in the
-- cart's transaction, so for each cart number the rows are all there or none is:
--   SELECT cart FROM orders WHERE cart IS NOT NULL
--   GROUP BY cart HAVING count(*) <> min(cart_items)
-- finds a half-sold cart, and must find none. NULL in both: a single sale (/api/deduct).
ALTER TABLE orders ADD COLUMN cart bigint;
ALTER TABLE orders ADD COLUMN cart_items smallint CHECK (cart_items BETWEEN 1 AND 16);
ALTER TABLE orders ADD CONSTRAINT orders_cart_whole CHECK ((cart IS NULL) = (cart_items IS NULL));
CREATE INDEX orders_cart_idx ON orders (cart) WHERE cart IS NOT NULL;

-- The first answer given for an Idempotency-Key on a cart. A key's scope is the key with the
-- whole cart: `cart` is the cart written in one canonical way (its items in ascending goods
-- id, "1x2,7x1"), so listing the same items in another order is the same request, and the
-- same key on another cart is another request. The claim works as the idempotency table's
-- (001_schema.sql): an empty row inserted inside the sale's transaction, filled before the
-- commit. `goods` lists the cart's goods, so that a reset of any of them deletes the record,
-- as it deletes that goods' own records.
CREATE TABLE order_idempotency (
    cart    text        NOT NULL CHECK (length(cart) BETWEEN 3 AND 1000),
    key     text        NOT NULL CHECK (length(key) BETWEEN 1 AND 128),
    goods   bigint[]    NOT NULL,
    status  integer     NOT NULL DEFAULT 0 CHECK (status = 0 OR status BETWEEN 100 AND 599),
    body    text,
    created timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cart, key)
);
CREATE INDEX order_idempotency_goods_idx ON order_idempotency USING gin (goods);
