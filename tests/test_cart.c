/*
 * test_cart.c - the pure parts of a cart (service/sale/cart.h): the order its locks are taken in,
 * and its canonical text, the scope of its Idempotency-Key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "service/sale/cart.h"

static void test_sorted_by_goods_id(void **state)
{
    const cart_item items[] = {{7, 1}, {1, 2}, {42, 1}, {3, 5}};
    size_t order[4];

    (void)state;
    cart_lock_order(items, 4, false, NULL, order);
    assert_int_equal(order[0], 1); /* goods 1 */
    assert_int_equal(order[1], 3); /* goods 3 */
    assert_int_equal(order[2], 0); /* goods 7 */
    assert_int_equal(order[3], 2); /* goods 42 */
}

/* The deadlock's two carts: in opposite orders as listed, in one order once sorted. */
static void test_opposite_carts_share_one_order(void **state)
{
    const cart_item a[] = {{1, 1}, {7, 1}}, b[] = {{7, 1}, {1, 1}};
    size_t oa[2], ob[2];

    (void)state;
    cart_lock_order(a, 2, true, NULL, oa);
    cart_lock_order(b, 2, true, NULL, ob);
    assert_true(a[oa[0]].goods_id == 1 && b[ob[0]].goods_id == 7); /* as listed: a cycle */
    cart_lock_order(a, 2, false, NULL, oa);
    cart_lock_order(b, 2, false, NULL, ob);
    assert_true(a[oa[0]].goods_id == 1 && b[ob[0]].goods_id == 1); /* sorted: one order */
}

static void test_as_listed_keeps_the_request_order(void **state)
{
    const cart_item items[] = {{9, 1}, {2, 1}, {5, 1}};
    size_t order[3];

    (void)state;
    cart_lock_order(items, 3, true, NULL, order);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(order[i], i);
}

static int64_t stripe_of_4(int64_t goods_id)
{
    return goods_id % 4;
}

/* Goods that share a lock come out next to each other, so that the cart takes it once. */
static void test_shared_locks_adjacent(void **state)
{
    const cart_item items[] = {{5, 1}, {2, 1}, {1, 1}, {6, 1}};
    size_t order[4];

    (void)state;
    cart_lock_order(items, 4, false, stripe_of_4, order);
    /* stripes: 5->1, 2->2, 1->1, 6->2: order by (stripe, id): 1, 5, 2, 6 */
    assert_int_equal(items[order[0]].goods_id, 1);
    assert_int_equal(items[order[1]].goods_id, 5);
    assert_int_equal(items[order[2]].goods_id, 2);
    assert_int_equal(items[order[3]].goods_id, 6);
}

static void test_text_is_canonical(void **state)
{
    const cart_item a[] = {{7, 1}, {1, 2}}, b[] = {{1, 2}, {7, 1}}, c[] = {{1, 3}, {7, 1}};
    char ta[CART_TEXT_MAX], tb[CART_TEXT_MAX], tc[CART_TEXT_MAX];

    (void)state;
    assert_int_equal(cart_text(a, 2, ta, sizeof(ta)), 0);
    assert_int_equal(cart_text(b, 2, tb, sizeof(tb)), 0);
    assert_int_equal(cart_text(c, 2, tc, sizeof(tc)), 0);
    assert_string_equal(ta, "1x2,7x1");
    assert_string_equal(ta, tb);     /* the same items in another order: the same cart */
    assert_string_not_equal(ta, tc); /* another count: another cart */
}

/* The largest cart fits CART_TEXT_MAX; a buffer too small is refused, not overrun. */
static void test_text_bounds(void **state)
{
    cart_item items[CART_MAX_ITEMS];
    char text[CART_TEXT_MAX], small[8];

    (void)state;
    for (int i = 0; i < CART_MAX_ITEMS; i++)
        items[i] = (cart_item){INT64_MAX - i, 10000};
    assert_int_equal(cart_text(items, CART_MAX_ITEMS, text, sizeof(text)), 0);
    assert_true(strlen(text) < CART_TEXT_MAX);
    assert_int_equal(cart_text(items, 2, small, sizeof(small)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sorted_by_goods_id),
        cmocka_unit_test(test_opposite_carts_share_one_order),
        cmocka_unit_test(test_as_listed_keeps_the_request_order),
        cmocka_unit_test(test_shared_locks_adjacent),
        cmocka_unit_test(test_text_is_canonical),
        cmocka_unit_test(test_text_bounds),
    };
    return cmocka_run_group_tests_name("cart", tests, NULL, NULL);
}
