/*
 * owner.h - who holds a lock: "<128-bit random id in hex>:<thread number>".
 *
 * Redis sees many processes on many machines, so an owner must be unique across all of
 * them: a random 128-bit id per lock_client (one client per process in practice; a child
 * made by fork() creates its own client and so gets its own id) makes a collision as likely
 * as guessing a UUID. Within the process, each thread gets a number from a counter the
 * first time it asks. Numbers are never reused, unlike kernel thread ids, so a new thread
 * can never inherit the hold of a thread that exited while holding a lock.
 */
#ifndef LOCK_OWNER_H
#define LOCK_OWNER_H

#include <stddef.h>
#include <stdint.h>

#define LOCK__PROCESS_ID_LEN 32 /* hex digits */
#define LOCK__OWNER_MAX 64      /* enough for the id, ':' and a 20-digit number, plus NUL */

/*
 * Fills out with 128 bits from the kernel's random source (getrandom(2)) as 32 hex digits
 * and a NUL. Returns 0, or -1 if the kernel gave no random bytes (errno tells why).
 */
int lock__process_id_new(char out[LOCK__PROCESS_ID_LEN + 1]);

/* The calling thread's number: 1, 2, 3... in order of first call, the same for the
 * thread's life. */
uint64_t lock__thread_number(void);

/* Writes "<process_id>:<thread number of the calling thread>" into out (LOCK__OWNER_MAX). */
void lock__owner_format(const char *process_id, char out[LOCK__OWNER_MAX]);

#endif
