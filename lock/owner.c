/*
 * owner.c - owner identity: a random id per client plus a number per thread (see owner.h).
 */
#include "lock/owner.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/random.h>

/* The last number handed out. Thread numbers are process-wide, not per client: a thread
 * is the same owner-half whichever client it calls. */
static _Atomic uint64_t last_thread_number;

/* 0 until the thread first asks. */
static _Thread_local uint64_t my_thread_number;

int lock__process_id_new(char out[LOCK__PROCESS_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char bytes[LOCK__PROCESS_ID_LEN / 2];
    size_t got = 0;

    /* getrandom() can return fewer bytes than asked only when interrupted; retry. Without
     * GRND_NONBLOCK it waits for the pool to be initialised once at boot, which is what a
     * unique id needs. */
    while (got < sizeof(bytes)) {
        ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(bytes); i++) {
        out[2 * i] = hex[bytes[i] >> 4];
        out[2 * i + 1] = hex[bytes[i] & 0xf];
    }
    out[LOCK__PROCESS_ID_LEN] = '\0';
    return 0;
}

uint64_t lock__thread_number(void)
{
    if (my_thread_number == 0)
        my_thread_number = atomic_fetch_add(&last_thread_number, 1) + 1;
    return my_thread_number;
}

void lock__owner_format(const char *process_id, char out[LOCK__OWNER_MAX])
{
    snprintf(out, LOCK__OWNER_MAX, "%s:%" PRIu64, process_id, lock__thread_number());
}
