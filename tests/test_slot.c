/*
 * test_slot.c - Redis Cluster key slots and redirections (lock/slot.c), against values a real
 * cluster-enabled redis-server gave with CLUSTER KEYSLOT.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "lock/slot.h"

static int slot_of(const char *key)
{
    return lock__key_slot(key, strlen(key));
}

static void test_crc16_check_value(void **state)
{
    (void)state;
    /* The XMODEM check value: the CRC of the ASCII digits 1 to 9. */
    assert_int_equal(lock__crc16("123456789", 9), 0x31C3);
    assert_int_equal(lock__crc16("", 0), 0);
}

static void test_slots_as_redis_computes_them(void **state)
{
    (void)state;
    /* Each value is what `redis-cli CLUSTER KEYSLOT <key>` answered (Redis 7.0). */
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("hello"), 866);
    assert_int_equal(slot_of("123456789"), 12739);
    assert_int_equal(slot_of(""), 0);
    assert_int_equal(slot_of("lock:goods:1"), 977);
}

static void test_hash_tags(void **state)
{
    (void)state;
    /* The lock and its fencing counter share the slot of their tag. */
    assert_int_equal(slot_of("lock:goods:{1}"), 9842);
    assert_int_equal(slot_of("lock:goods:{1}:fence"), 9842);
    assert_int_equal(slot_of("{user1000}.following"), 3443);
    assert_int_equal(slot_of("{user1000}.followers"), 3443);
    /* Only the first tag counts; an empty one means no tag; a nested brace is content. */
    assert_int_equal(slot_of("foo{bar}{zap}"), 5061); /* = slot of "bar" */
    assert_int_equal(slot_of("foo{}{bar}"), 8363);    /* the whole key */
    assert_int_equal(slot_of("foo{{bar}}zap"), 4015); /* "{bar" */
    assert_int_equal(slot_of("foo{bar"), lock__crc16("foo{bar", 7) % LOCK__SLOTS);
    /* The length is what counts, not a NUL. */
    assert_int_equal(lock__key_slot("foo\0bar", 3), 12182);
}

static void test_redirections(void **state)
{
    lock__redirect r;

    (void)state;
    assert_int_equal(lock__parse_redirect("MOVED 3999 127.0.0.1:6381", &r), 0);
    assert_false(r.ask);
    assert_int_equal(r.slot, 3999);
    assert_string_equal(r.host, "127.0.0.1");
    assert_int_equal(r.port, 6381);

    assert_int_equal(lock__parse_redirect("ASK 16383 ::1:30001", &r), 0);
    assert_true(r.ask);
    assert_int_equal(r.slot, 16383);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 30001);

    /* not redirections, or malformed ones */
    assert_int_equal(lock__parse_redirect("ERR wrong number of arguments", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 16384 127.0.0.1:6381", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED -1 127.0.0.1:6381", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 12 127.0.0.1:0", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 12 127.0.0.1:65536", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 12 127.0.0.1", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 12 :6379", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 12x 127.0.0.1:6379", &r), -1);
    assert_int_equal(lock__parse_redirect("MOVED 12 127.0.0.1:63x9", &r), -1);
    assert_int_equal(lock__parse_redirect("moved 12 127.0.0.1:6379", &r), -1);
    assert_int_equal(lock__parse_redirect(NULL, &r), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_check_value),
        cmocka_unit_test(test_slots_as_redis_computes_them),
        cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_redirections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
