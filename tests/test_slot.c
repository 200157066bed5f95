/*
 * test_slot.c - Redis Cluster key slots and redirections (lock/slot.c), against values a real
 * cluster-enabled redis-server gave with CLUSTER KEYSLOT; and the router's slot map
 * (lock/cluster.c): CLUSTER SLOTS replies read, the map looked up, a MOVED taken into it.
 * No server: the replies are built here, and the router's seed is a free port nobody
 * listens on (tests/test_cluster.c runs the router against a real cluster).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include <hiredis/hiredis.h>
#include <stdlib.h>

#include "lock/clock.h"
#include "lock/cluster.h"
#include "lock/lock.h"
#include "lock/slot.h"
#include "tests/support/ports.h"

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

static void test_has_tag(void **state)
{
    (void)state;
    assert_true(lock__key_has_tag("lock:goods:{1}", 14));
    assert_true(lock__key_has_tag("{user1000}.following", 20));
    assert_true(lock__key_has_tag("foo{{bar}}zap", 13)); /* the tag is "{bar" */
    assert_false(lock__key_has_tag("lock:goods:1", 12));
    assert_false(lock__key_has_tag("foo{}{bar}", 10)); /* the first one is empty: no tag */
    assert_false(lock__key_has_tag("foo{bar", 7));
    assert_false(lock__key_has_tag("foo}bar{", 8));
    assert_false(lock__key_has_tag("", 0));
}

/* ---- CLUSTER SLOTS replies, built by hand in hiredis' own reply type ---- */

static redisReply *r_new(int type)
{
    redisReply *r = calloc(1, sizeof(*r));

    assert_non_null(r);
    r->type = type;
    return r;
}

static redisReply *r_int(long long v)
{
    redisReply *r = r_new(REDIS_REPLY_INTEGER);

    r->integer = v;
    return r;
}

static redisReply *r_str(const char *s)
{
    redisReply *r = r_new(REDIS_REPLY_STRING);

    r->str = strdup(s);
    r->len = strlen(s);
    return r;
}

static redisReply *r_arr(size_t n, ...)
{
    redisReply *r = r_new(REDIS_REPLY_ARRAY);
    va_list ap;

    r->elements = n;
    r->element = calloc(n, sizeof(*r->element));
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}

/* One line: [first, last, [host, port, id]] plus one replica. */
static redisReply *r_range(int first, int last, const char *host, int port)
{
    return r_arr(4, r_int(first), r_int(last), r_arr(3, r_str(host), r_int(port), r_str("id")),
                 r_arr(3, r_str(host), r_int(port + 1000), r_str("replica-id")));
}

static void test_parse_cluster_slots(void **state)
{
    lock__slot_range ranges[4];
    int n = -1;
    redisReply *r = r_arr(3, r_range(0, 5460, "127.0.0.1", 7000),
                          r_range(5461, 10922, "", 7001), /* unknown endpoint: the asked host */
                          r_range(10923, 16383, "10.0.0.3", 7002));

    (void)state;
    assert_int_equal(lock__cluster_parse_slots(r, "192.168.1.9", ranges, 4, &n), LOCK_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ranges[0].first, 0);
    assert_int_equal(ranges[0].last, 5460);
    assert_string_equal(ranges[0].master.host, "127.0.0.1");
    assert_int_equal(ranges[0].master.port, 7000);
    assert_string_equal(ranges[1].master.host, "192.168.1.9");
    assert_int_equal(ranges[1].master.port, 7001);
    assert_int_equal(ranges[2].first, 10923);
    assert_int_equal(ranges[2].last, 16383);
    /* More ranges than room: refused, not cut short (a partial map would be wrong). */
    assert_int_equal(lock__cluster_parse_slots(r, "h", ranges, 2, &n), LOCK_ERR_REDIS);
    assert_int_equal(n, 0);
    freeReplyObject(r);

    /* Malformed: a slot out of range, first > last, a port 0, an error reply. */
    r = r_arr(1, r_range(0, 16384, "a", 1));
    assert_int_equal(lock__cluster_parse_slots(r, "h", ranges, 4, &n), LOCK_ERR_REDIS);
    freeReplyObject(r);
    r = r_arr(1, r_range(10, 9, "a", 1));
    assert_int_equal(lock__cluster_parse_slots(r, "h", ranges, 4, &n), LOCK_ERR_REDIS);
    freeReplyObject(r);
    r = r_arr(1, r_arr(3, r_int(0), r_int(1), r_arr(2, r_str("a"), r_int(0))));
    assert_int_equal(lock__cluster_parse_slots(r, "h", ranges, 4, &n), LOCK_ERR_REDIS);
    freeReplyObject(r);
    r = r_new(REDIS_REPLY_ERROR);
    r->str = strdup("ERR This instance has cluster support disabled");
    assert_int_equal(lock__cluster_parse_slots(r, "h", ranges, 4, &n), LOCK_ERR_REDIS);
    freeReplyObject(r);
    /* An empty map (a cluster being made) parses as empty. */
    r = r_arr(0);
    assert_int_equal(lock__cluster_parse_slots(r, "h", ranges, 4, &n), LOCK_OK);
    assert_int_equal(n, 0);
    freeReplyObject(r);
}

/* A router whose seed nobody answers: the map is only what the test puts in it. */
static lock__cluster *offline_router(void)
{
    char seed[32];
    lock__cluster *cl = NULL;

    snprintf(seed, sizeof(seed), "127.0.0.1:%d", support_free_port());
    assert_int_equal(lock__cluster_create(seed, 2, 200, 200, &cl), LOCK_OK);
    return cl;
}

static void assert_master(lock__cluster *cl, int slot, const char *host, int port)
{
    lock__addr a;

    assert_int_equal(lock__cluster_master_of(cl, slot, &a), LOCK_OK);
    assert_string_equal(a.host, host);
    assert_int_equal(a.port, port);
}

static void test_map_lookups(void **state)
{
    lock__cluster *cl = offline_router();
    lock__slot_range three[3] = {{0, 5460, {"127.0.0.1", 7000}},
                                 {5461, 10922, {"127.0.0.1", 7001}},
                                 {10923, 16383, {"127.0.0.1", 7002}}};
    lock__slot_range two[2] = {{0, 99, {"127.0.0.1", 7002}}, {100, 200, {"127.0.0.1", 7003}}};
    lock__addr a;

    (void)state;
    /* Nothing known yet. */
    assert_int_equal(lock__cluster_master_of(cl, 0, &a), LOCK_ERR_REDIS);
    assert_int_equal(lock__cluster_master_of(cl, LOCK__SLOTS, &a), LOCK_ERR_INVALID);
    assert_int_equal(lock__cluster_master_of(cl, -1, &a), LOCK_ERR_INVALID);

    assert_int_equal(lock__cluster_apply(cl, three, 3), LOCK_OK);
    assert_master(cl, 0, "127.0.0.1", 7000);
    assert_master(cl, 5460, "127.0.0.1", 7000);
    assert_master(cl, 5461, "127.0.0.1", 7001);
    assert_master(cl, 10922, "127.0.0.1", 7001);
    assert_master(cl, 10923, "127.0.0.1", 7002);
    assert_master(cl, 16383, "127.0.0.1", 7002);
    /* Where the keys of the lock of goods 1 go: slot 9842, both of them. */
    assert_master(cl, lock__key_slot("lock:goods:{1}:fence", 20), "127.0.0.1", 7001);
    assert_master(cl, lock__key_slot("foo", 3), "127.0.0.1", 7002); /* 12182 */

    /* A new map replaces the old one whole: slots it does not cover are nobody's. */
    assert_int_equal(lock__cluster_apply(cl, two, 2), LOCK_OK);
    assert_master(cl, 50, "127.0.0.1", 7002);
    assert_master(cl, 200, "127.0.0.1", 7003);
    assert_int_equal(lock__cluster_master_of(cl, 201, &a), LOCK_ERR_REDIS);
    assert_int_equal(lock__cluster_master_of(cl, 16383, &a), LOCK_ERR_REDIS);
    /* A bad range leaves the map as it was. */
    two[1].last = LOCK__SLOTS;
    assert_int_equal(lock__cluster_apply(cl, two, 2), LOCK_ERR_INVALID);
    assert_master(cl, 200, "127.0.0.1", 7003);
    lock__cluster_destroy(cl);
}

/* Masters replaced one after another, far more of them than the list holds: each new map
 * forgets the masters it does not name, so every map applies (before, the 65th distinct
 * master failed as LOCK_ERR_NOMEM and the map froze). */
static void test_map_forgets_masters_it_does_not_name(void **state)
{
    lock__cluster *cl = offline_router();
    lock__slot_range two[2] = {{0, 8191, {"127.0.0.1", 7000}}, {8192, 16383, {"127.0.0.1", 0}}};

    (void)state;
    for (int i = 0; i < 3 * LOCK__CLUSTER_NODES_MAX; i++) {
        two[1].master.port = 20000 + i; /* a new master for the second half every time */
        assert_int_equal(lock__cluster_apply(cl, two, 2), LOCK_OK);
        assert_master(cl, 8192, "127.0.0.1", 20000 + i);
        assert_master(cl, 0, "127.0.0.1", 7000);
    }
    lock__cluster_destroy(cl);
}

static void test_redirect_handling(void **state)
{
    lock__cluster *cl = offline_router();
    lock__slot_range all = {0, 16383, {"127.0.0.1", 7000}};
    lock__redirect r;

    (void)state;
    assert_int_equal(lock__cluster_apply(cl, &all, 1), LOCK_OK);
    /* MOVED: that slot, and only that slot, is served elsewhere from now on. */
    assert_int_equal(lock__parse_redirect("MOVED 12182 127.0.0.1:7005", &r), 0);
    assert_int_equal(lock__cluster_redirected(cl, &r), LOCK_OK);
    assert_master(cl, 12182, "127.0.0.1", 7005);
    assert_master(cl, 12181, "127.0.0.1", 7000);
    assert_master(cl, 12183, "127.0.0.1", 7000);
    /* ASK: asked there once; the map does not change. */
    assert_int_equal(lock__parse_redirect("ASK 3 127.0.0.1:7009", &r), 0);
    assert_int_equal(lock__cluster_redirected(cl, &r), LOCK_OK);
    assert_master(cl, 3, "127.0.0.1", 7000);
    /* A MOVED back to a master already known reuses it. */
    assert_int_equal(lock__parse_redirect("MOVED 12182 127.0.0.1:7000", &r), 0);
    assert_int_equal(lock__cluster_redirected(cl, &r), LOCK_OK);
    assert_master(cl, 12182, "127.0.0.1", 7000);
    lock__cluster_destroy(cl);
}

/* With no master reachable, a command fails within its bound, with a reason; a script whose
 * keys are in two slots, or whose lock name has no tag, is refused before anything is sent. */
static void test_routing_refusals(void **state)
{
    lock__cluster *cl = offline_router();
    const char *untagged[2] = {"lock:goods:1", "lock:goods:1:fence"};
    const char *split[2] = {"lock:goods:{1}", "lock:goods:{2}:fence"};
    const char *args[3] = {"owner", "1000", "1"};
    const char *get[2] = {"GET", "foo"};
    redisReply *r = NULL;
    int64_t now = lock__now_ns();

    (void)state;
    assert_int_equal(lock__cluster_script(cl, LOCK__SCRIPT_ACQUIRE, false, now, now, 2, untagged, 3,
                                          args, NULL, &r),
                     LOCK_ERR_INVALID);
    assert_null(r);
    assert_int_equal(lock__cluster_script(cl, LOCK__SCRIPT_ACQUIRE, false, now, now, 2, split, 3,
                                          args, NULL, &r),
                     LOCK_ERR_INVALID);
    assert_int_equal(lock__cluster_command(cl, now, now + 400000000, 2, get, &r), LOCK_ERR_REDIS);
    assert_null(r);
    assert_non_null(strstr(lock_last_error(), "no master known for slot 12182"));
    lock__cluster_destroy(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_check_value),
        cmocka_unit_test(test_slots_as_redis_computes_them),
        cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_redirections),
        cmocka_unit_test(test_has_tag),
        cmocka_unit_test(test_parse_cluster_slots),
        cmocka_unit_test(test_map_lookups),
        cmocka_unit_test(test_map_forgets_masters_it_does_not_name),
        cmocka_unit_test(test_redirect_handling),
        cmocka_unit_test(test_routing_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
