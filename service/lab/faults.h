/*
 * faults.h - fault injection: what the X-Fault header asks a replica to do to one deduction,
 * and where (the named points of deduct.h). Off unless the replica was started with
 * FAULTS=on: then, and only then, a request may carry
 *
 *   X-Fault: crash-in-section          the process ends (_exit) while it holds the guard,
 *                                      after reading the stock: a crash mid-section;
 *   X-Fault: pause-in-section=MS       sleeps MS after reading the stock: a slow section
 *                                      (the process runs on: a watchdog keeps renewing);
 *   X-Fault: pause-before-commit=MS    sleeps MS after the guard's last check, before COMMIT;
 *   X-Fault: stop-before-commit=MS     stops the whole process (SIGSTOP, every thread,
 *                                      the watchdog too) for MS at the same place: a GC-like
 *                                      pause; a child process it forks sends the SIGCONT (a
 *                                      SIGCONT from outside ends the stop sooner);
 *   X-Fault: stop-before-claim=MS      the same stop, once the guard is held, before the
 *                                      transaction begins: a holder stopped before its
 *                                      claim, which a fencing token refuses when it resumes
 *                                      after its lease went to another (Kleppmann's figure);
 *   X-Fault: pause-before-release=MS   the release sleeps MS just before the command that
 *                                      deletes the lock (owner-get-del: between GET and DEL);
 *   X-Fault: pause-between-locks=MS    POST /api/order only: sleeps MS after the cart's first
 *                                      lock (or row lock) is taken, before the second: two
 *                                      carts in opposite orders then each hold their first
 *                                      (the deadlock of multi-naive); a cart that then
 *                                      gives up holds what it has for MS again before
 *                                      letting go (order.c says why); /api/order takes no
 *                                      other fault (the lab's hold-at=between-locks aside,
 *                                      lab.h), and a deduct, one lock, ignores it;
 *   X-Fault: nested                    inside the section, takes the same guard again and
 *                                      gives it back, as a guarded helper called from the
 *                                      section would: a lock that is not reentrant waits
 *                                      for itself (503 lock_timeout).
 *
 * Several may be combined, comma-separated ("nested, pause-in-section=200"); MS is 1 to
 * 60000. A replica without FAULTS=on answers any X-Fault with 400, and so does an unknown or
 * malformed fault: nothing is sold. The ladder's driver (loadtest/ladder) uses these to
 * provoke each rung's flaw at a known moment instead of waiting for it under load.
 */
#ifndef SERVICE_FAULTS_H
#define SERVICE_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/base.h"
#include "service/guards/mode.h"

#define FAULTS_MAX_MS 60000
/* The exit status of a process that crash-in-section ended: not one a real failure gives. */
#define FAULTS_CRASH_STATUS 86

typedef struct fault_plan {
    bool crash_in_section;
    int64_t pause_in_section_ms;     /* 0: none */
    int64_t pause_before_commit_ms;  /* 0: none */
    int64_t stop_before_commit_ms;   /* 0: none */
    int64_t stop_before_claim_ms;    /* 0: none */
    int64_t pause_before_release_ms; /* 0: none */
    int64_t pause_between_locks_ms;  /* 0: none (a cart's, service/sale/order.c) */
    bool nested;
} fault_plan;

/* Parses an X-Fault value into *out. Returns 0, or -1 with a one-line reason in detail
 * (unknown fault, bad MS, a fault named twice, an empty list). */
int faults_parse(const char *value, fault_plan *out, char *detail, size_t detail_len);

/* Whether plan asks for nothing but what a cart carries out: pause-between-locks, or no fault
 * at all (a header that only holds, lab.h). POST /api/order refuses any other plan. plan is
 * faults_parse's, or zeroed with memset (the comparison covers its padding). */
bool faults_cart_only(const fault_plan *plan);

/*
 * The X-Fault header is a comma-separated list: reads its next item from *cursor, trimmed of
 * spaces and tabs on both sides, into [*item, *item + *len) (len 0 for an empty item), and
 * leaves *cursor on the comma that ends it or on the final NUL. One reader of the list for
 * every parser of the header (faults_parse, the lab's hold-at).
 */
void faults_next_item(const char **cursor, const char **item, size_t *len);

/* One deduction's faults: what deduct_execute's hook needs to carry them out. */
typedef struct fault_run {
    const fault_plan *plan;
    const mode *mode;  /* the deduction's mode: nested takes its guard again */
    guard_env *guards; /* the guards' environment */
    int64_t goods_id;  /* the deduction's goods */
} fault_run;

/* A deduct_hook's `at` for a fault_run (arg): carries out the plan at each point. */
int faults_at(void *arg, deduct_point point, guard_hold *hold, char *why, size_t why_len);

#endif
