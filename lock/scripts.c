/*
 * scripts.c - the Lua scripts, embedded from lock/'s .lua files; EVALSHA with a NOSCRIPT retry.
 *
 * Embedding: the assembler's .incbin directive copies a file's bytes into the object file,
 * so the scripts stay in .lua files (readable, testable with redis-cli --eval) and no copy
 * of their text lives in a C string. A NUL byte is appended so the C side can use them as
 * strings. The paths are relative to the directory the compiler runs in, the project root
 * (the Makefile builds from there and makes scripts.o depend on the .lua files).
 *
 * The SHA-1 of each text is computed once (pthread_once) so the very first call can be an
 * EVALSHA; when Redis answers NOSCRIPT, the text is sent with SCRIPT LOAD, whose answer is
 * checked against our SHA-1, and the EVALSHA is sent again.
 */
#include "lock/scripts.h"
#include "lock/error.h"
#include "lock/result.h"
#include "lock/sha1.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Defines the hidden symbol `sym`: the bytes of `file` followed by a NUL, in .rodata. */
#define LOCK__EMBED(sym, file)                                                                     \
    __asm__(".pushsection .rodata, \"a\"\n"                                                        \
            ".global " #sym "\n"                                                                   \
            ".hidden " #sym "\n"                                                                   \
            ".type " #sym ", @object\n" #sym ":\n"                                                 \
            ".incbin \"" file "\"\n"                                                               \
            ".byte 0\n"                                                                            \
            ".size " #sym ", . - " #sym "\n"                                                       \
            ".popsection\n")

LOCK__EMBED(lock__lua_acquire, "lock/acquire.lua");
LOCK__EMBED(lock__lua_release, "lock/release.lua");
LOCK__EMBED(lock__lua_leave, "lock/leave.lua");
LOCK__EMBED(lock__lua_renew, "lock/renew.lua");
LOCK__EMBED(lock__lua_inspect, "lock/inspect.lua");
LOCK__EMBED(lock__lua_delete_if_value, "lock/delete_if_value.lua");
LOCK__EMBED(lock__lua_fence_raise, "lock/fence_raise.lua");
LOCK__EMBED(lock__lua_rw_read, "lock/rw_read.lua");
LOCK__EMBED(lock__lua_rw_write, "lock/rw_write.lua");
LOCK__EMBED(lock__lua_rw_release, "lock/rw_release.lua");
LOCK__EMBED(lock__lua_rw_leave, "lock/rw_leave.lua");
LOCK__EMBED(lock__lua_rw_renew, "lock/rw_renew.lua");

/* Hidden, so the compiler addresses them directly rather than through the GOT. */
extern const char lock__lua_acquire[] __attribute__((visibility("hidden")));
extern const char lock__lua_release[] __attribute__((visibility("hidden")));
extern const char lock__lua_leave[] __attribute__((visibility("hidden")));
extern const char lock__lua_renew[] __attribute__((visibility("hidden")));
extern const char lock__lua_inspect[] __attribute__((visibility("hidden")));
extern const char lock__lua_delete_if_value[] __attribute__((visibility("hidden")));
extern const char lock__lua_fence_raise[] __attribute__((visibility("hidden")));
extern const char lock__lua_rw_read[] __attribute__((visibility("hidden")));
extern const char lock__lua_rw_write[] __attribute__((visibility("hidden")));
extern const char lock__lua_rw_release[] __attribute__((visibility("hidden")));
extern const char lock__lua_rw_leave[] __attribute__((visibility("hidden")));
extern const char lock__lua_rw_renew[] __attribute__((visibility("hidden")));

#define SCRIPT_MAX_KEYS 5
#define SCRIPT_MAX_ARGS 6

typedef struct script_entry {
    const char *text;
    const char *file; /* for error messages */
    char sha[LOCK__SHA1_HEX_LEN + 1];
} script_entry;

static script_entry scripts[LOCK__SCRIPT_COUNT] = {
    [LOCK__SCRIPT_ACQUIRE] = {lock__lua_acquire, "acquire.lua", ""},
    [LOCK__SCRIPT_RELEASE] = {lock__lua_release, "release.lua", ""},
    [LOCK__SCRIPT_LEAVE] = {lock__lua_leave, "leave.lua", ""},
    [LOCK__SCRIPT_RENEW] = {lock__lua_renew, "renew.lua", ""},
    [LOCK__SCRIPT_INSPECT] = {lock__lua_inspect, "inspect.lua", ""},
    [LOCK__SCRIPT_DELETE_IF_VALUE] = {lock__lua_delete_if_value, "delete_if_value.lua", ""},
    [LOCK__SCRIPT_FENCE_RAISE] = {lock__lua_fence_raise, "fence_raise.lua", ""},
    [LOCK__SCRIPT_RW_READ] = {lock__lua_rw_read, "rw_read.lua", ""},
    [LOCK__SCRIPT_RW_WRITE] = {lock__lua_rw_write, "rw_write.lua", ""},
    [LOCK__SCRIPT_RW_RELEASE] = {lock__lua_rw_release, "rw_release.lua", ""},
    [LOCK__SCRIPT_RW_LEAVE] = {lock__lua_rw_leave, "rw_leave.lua", ""},
    [LOCK__SCRIPT_RW_RENEW] = {lock__lua_rw_renew, "rw_renew.lua", ""},
};

static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_hash(void)
{
    for (int i = 0; i < LOCK__SCRIPT_COUNT; i++)
        lock__sha1_hex(scripts[i].text, strlen(scripts[i].text), scripts[i].sha);
}

void lock__scripts_init(void)
{
    pthread_once(&scripts_once, scripts_hash);
}

const char *lock__script_text(lock__script s)
{
    return scripts[s].text;
}

const char *lock__script_sha(lock__script s)
{
    return scripts[s].sha;
}

static bool reply_is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* SCRIPT LOAD: sends the text; Redis answers with the SHA-1 it will know it by. */
static int script_load(lock__conn *conn, lock__script s, int64_t deadline_ns)
{
    const char *argv[3] = {"SCRIPT", "LOAD", scripts[s].text};
    size_t lens[3] = {6, 4, strlen(scripts[s].text)};
    redisReply *r = NULL;
    int rc;

    rc = lock__conn_command(conn, deadline_ns, 3, argv, lens, &r);
    if (rc != LOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, scripts[s].sha) != 0) {
        /* An error reply, or a SHA-1 other than ours: EVALSHA would never find it. */
        lock__error_set("SCRIPT LOAD: %s",
                        r->type == REDIS_REPLY_ERROR ? r->str : "unexpected SHA-1");
        rc = LOCK_ERR_REDIS;
    }
    freeReplyObject(r);
    return rc;
}

int lock__script_run_reply(lock__conn *conn, lock__script s, int64_t deadline_ns, int nkeys,
                           const char *const *keys, int nargs, const char *const *args,
                           redisReply **out)
{
    const char *argv[3 + SCRIPT_MAX_KEYS + SCRIPT_MAX_ARGS];
    size_t lens[3 + SCRIPT_MAX_KEYS + SCRIPT_MAX_ARGS];
    char numkeys[12];
    int argc = 0;
    int rc;

    *out = NULL;
    snprintf(numkeys, sizeof(numkeys), "%d", nkeys);
    argv[argc++] = "EVALSHA";
    argv[argc++] = scripts[s].sha;
    argv[argc++] = numkeys;
    for (int i = 0; i < nkeys && i < SCRIPT_MAX_KEYS; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nargs && i < SCRIPT_MAX_ARGS; i++)
        argv[argc++] = args[i];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);

    /* lock__conn_command leaves *out NULL whenever it fails. */
    rc = lock__conn_command(conn, deadline_ns, argc, argv, lens, out);
    if (rc == LOCK_OK && reply_is_noscript(*out)) {
        /* Redis restarted, failed over or flushed its scripts: teach it and try once more.
         * The script did not run, so running it now is not running it twice. */
        freeReplyObject(*out);
        *out = NULL;
        rc = script_load(conn, s, deadline_ns);
        if (rc == LOCK_OK)
            rc = lock__conn_command(conn, deadline_ns, argc, argv, lens, out);
    }
    return rc;
}

int lock__script_run(lock__conn *conn, lock__script s, int64_t deadline_ns, int nkeys,
                     const char *const *keys, int nargs, const char *const *args, redisReply **out)
{
    redisReply *r = NULL;
    int rc = lock__script_run_reply(conn, s, deadline_ns, nkeys, keys, nargs, args, &r);

    *out = NULL;
    if (rc != LOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        lock__error_set("EVALSHA %s: %s", scripts[s].file, r->str);
        freeReplyObject(r);
        return LOCK_ERR_REDIS;
    }
    *out = r;
    return LOCK_OK;
}
