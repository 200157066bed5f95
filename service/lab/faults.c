/*
 * faults.c - the X-Fault parser and the hook that carries a plan out (faults.h says what each
 * fault does). Each fault acts at one point of the deduction and nowhere else:
 *
 *   entered   nested, stop-before-claim
 *   read      crash-in-section, pause-in-section
 *   checked   pause-before-commit, stop-before-commit
 *   (leave)   pause-before-release, through guard_hold.release_pause_ms
 *   (a cart)  pause-between-locks, carried out by service/sale/order.c, not by the hook
 */
#include "service/lab/faults.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "service/clock.h"
#include "service/log.h"

/* ---- parsing ---- */

/* The fault named by [name, name+len) with its argument text (NULL: none); sets it in out. */
static int set_fault(fault_plan *out, const char *name, size_t len, const char *arg, size_t arg_len,
                     char *detail, size_t detail_len)
{
    static const struct {
        const char *name;
        size_t offset; /* of an int64_t field; (size_t)-1 for the flags below */
    } timed[] = {
        {"pause-in-section", offsetof(fault_plan, pause_in_section_ms)},
        {"pause-before-commit", offsetof(fault_plan, pause_before_commit_ms)},
        {"stop-before-commit", offsetof(fault_plan, stop_before_commit_ms)},
        {"stop-before-claim", offsetof(fault_plan, stop_before_claim_ms)},
        {"pause-before-release", offsetof(fault_plan, pause_before_release_ms)},
        {"pause-between-locks", offsetof(fault_plan, pause_between_locks_ms)},
    };
    bool *flag = NULL;

    if (len == strlen("crash-in-section") && memcmp(name, "crash-in-section", len) == 0)
        flag = &out->crash_in_section;
    else if (len == strlen("nested") && memcmp(name, "nested", len) == 0)
        flag = &out->nested;
    if (flag != NULL) {
        if (arg != NULL) {
            snprintf(detail, detail_len, "X-Fault: %.*s takes no value", (int)len, name);
            return -1;
        }
        if (*flag) {
            snprintf(detail, detail_len, "X-Fault: %.*s given twice", (int)len, name);
            return -1;
        }
        *flag = true;
        return 0;
    }
    for (size_t i = 0; i < sizeof(timed) / sizeof(timed[0]); i++) {
        int64_t *field, ms = 0;
        if (len != strlen(timed[i].name) || memcmp(name, timed[i].name, len) != 0)
            continue;
        field = (int64_t *)((char *)out + timed[i].offset);
        if (arg == NULL || arg_len == 0 || arg_len > 5) {
            snprintf(detail, detail_len, "X-Fault: %s needs =MS, MS from 1 to %d", timed[i].name,
                     FAULTS_MAX_MS);
            return -1;
        }
        for (size_t k = 0; k < arg_len; k++) {
            if (arg[k] < '0' || arg[k] > '9') {
                ms = -1;
                break;
            }
            ms = ms * 10 + (arg[k] - '0');
        }
        if (ms < 1 || ms > FAULTS_MAX_MS) {
            snprintf(detail, detail_len, "X-Fault: %s needs =MS, MS from 1 to %d", timed[i].name,
                     FAULTS_MAX_MS);
            return -1;
        }
        if (*field != 0) {
            snprintf(detail, detail_len, "X-Fault: %s given twice", timed[i].name);
            return -1;
        }
        *field = ms;
        return 0;
    }
    snprintf(detail, detail_len,
             "X-Fault: unknown fault '%.*s'; known: crash-in-section, pause-in-section=MS, "
             "pause-before-commit=MS, stop-before-commit=MS, stop-before-claim=MS, "
             "pause-before-release=MS, "
             "pause-between-locks=MS, nested",
             (int)(len > 40 ? 40 : len), name);
    return -1;
}

bool faults_cart_only(const fault_plan *plan)
{
    fault_plan only;

    /* Compared whole, padding too (both zeroed by memset), so that a fault added to the plan
     * later is refused on a cart until order.c carries it out. */
    memset(&only, 0, sizeof(only));
    only.pause_between_locks_ms = plan->pause_between_locks_ms;
    return memcmp(plan, &only, sizeof(only)) == 0;
}

void faults_next_item(const char **cursor, const char **item, size_t *len)
{
    const char *p = *cursor, *end;

    while (*p == ' ' || *p == '\t')
        p++;
    *item = p;
    while (*p != '\0' && *p != ',')
        p++;
    end = p;
    while (end > *item && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *len = (size_t)(end - *item);
    *cursor = p;
}

int faults_parse(const char *value, fault_plan *out, char *detail, size_t detail_len)
{
    const char *p = value;
    int faults = 0;

    memset(out, 0, sizeof(*out));
    if (value == NULL)
        return -1;
    for (;;) {
        const char *item, *end, *eq;
        size_t len;

        faults_next_item(&p, &item, &len);
        end = item + len;
        if (end == item) {
            snprintf(detail, detail_len, "X-Fault: an empty fault in '%.60s'", value);
            return -1;
        }
        eq = memchr(item, '=', (size_t)(end - item));
        if (set_fault(out, item, (size_t)((eq != NULL ? eq : end) - item),
                      eq != NULL ? eq + 1 : NULL, eq != NULL ? (size_t)(end - eq - 1) : 0, detail,
                      detail_len) != 0)
            return -1;
        faults++;
        if (*p == '\0')
            break;
        p++; /* the comma */
    }
    return faults > 0 ? 0 : -1;
}

/* ---- carrying a plan out ---- */

/* Whether process pid is stopped (state T in /proc/pid/stat). Async-signal-safe: only
 * open, read and close, so the forked child may call it. */
static bool process_stopped(pid_t pid)
{
    char path[64], buf[256];
    const char *p;
    ssize_t n;
    int fd;

    /* snprintf is not on the async-signal-safe list: write the path by hand. */
    char digits[24];
    int nd = 0;
    unsigned long v = (unsigned long)pid;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    memcpy(path, "/proc/", 6);
    for (int i = 0; i < nd; i++)
        path[6 + i] = digits[nd - 1 - i];
    memcpy(path + 6 + nd, "/stat", 6);

    fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    return p != NULL && p[1] == ' ' && p[2] == 'T';
}

/*
 * Stops this whole process for ms at most (fault: the X-Fault named, for the log line of a
 * failed fork): a child is forked first, which sleeps ms and then
 * sends SIGCONT until the parent runs again; then the calling thread stops the process
 * (raise: the signal is this thread's, so it is taken, and every thread stopped, before
 * raise returns). Every thread stops, the lock's watchdog included, exactly as in a
 * stop-the-world pause. A SIGCONT from outside ends the stop sooner (a driver that has seen
 * what it waited for, loadtest/ladder); the child, whose SIGCONT is then not needed, is
 * ended, so that it cannot end a later stop of this process. The child only calls
 * async-signal-safe functions, as a child of a threaded process must.
 */
static void stop_process_for(const char *fault, int64_t ms)
{
    pid_t parent = getpid(), child;

    child = fork();
    if (child < 0) {
        log_event(LOG_WARN, "fault_failed", "fault=%s errno=%d", fault, errno);
        return;
    }
    if (child == 0) {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
        struct timespec tick = {.tv_sec = 0, .tv_nsec = 10 * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        for (int i = 0; i < 500; i++) {
            kill(parent, SIGCONT);
            nanosleep(&tick, NULL);
            if (!process_stopped(parent))
                break;
        }
        _exit(0);
    }
    raise(SIGSTOP);
    kill(child, SIGKILL); /* already gone (exited or a zombie) when it continued us: harmless */
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ;
}

int faults_at(void *arg, deduct_point point, guard_hold *hold, char *why, size_t why_len)
{
    const fault_run *run = arg;
    const fault_plan *plan = run->plan;

    switch (point) {
    case DEDUCT_AT_ENTERED:
        hold->release_pause_ms = plan->pause_before_release_ms;
        if (plan->nested) {
            /* A helper of the section that is guarded by the same lock, as in the course's
             * reentrancy example: a reentrant lock lets the same holder in again. */
            guard_hold inner;
            int rc = run->mode->enter(run->guards, run->goods_id, &inner, why, why_len);
            if (rc != GUARD_OK) {
                log_event(LOG_INFO, "fault_nested_refused", "mode=%s", run->mode->name);
                return rc;
            }
            run->mode->leave(run->guards, &inner);
        }
        if (plan->stop_before_claim_ms > 0)
            stop_process_for("stop-before-claim", plan->stop_before_claim_ms);
        return GUARD_OK;
    case DEDUCT_AT_READ:
        if (plan->crash_in_section) {
            log_event(LOG_WARN, "fault_crash", "mode=%s goods_id=%lld: exiting with status %d",
                      run->mode->name, (long long)run->goods_id, FAULTS_CRASH_STATUS);
            _exit(FAULTS_CRASH_STATUS);
        }
        if (plan->pause_in_section_ms > 0)
            clock_sleep_ms(plan->pause_in_section_ms);
        return GUARD_OK;
    case DEDUCT_AT_CHECKED:
        if (plan->pause_before_commit_ms > 0)
            clock_sleep_ms(plan->pause_before_commit_ms);
        if (plan->stop_before_commit_ms > 0)
            stop_process_for("stop-before-commit", plan->stop_before_commit_ms);
        return GUARD_OK;
    default:
        return GUARD_OK;
    }
}
