/*
 * child.h - a server a test starts as its own child: what redis_server.c, etcd_server.c and
 * zk_server.c share. Each of them knows its own server (its arguments, its ports, how to ask
 * it whether it is ready); this file knows the process: start it (fork + exec, the program
 * found and the arguments built before the fork), wait until it is ready or gone, freeze,
 * thaw and stop it, always by its PID (never by name: other servers of the same kind may run
 * beside it), and reap it.
 *
 * A PID of -1 means "not running"; every function here sets it so when the child is gone.
 */
#ifndef TESTS_SUPPORT_CHILD_H
#define TESTS_SUPPORT_CHILD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Sleeps ms milliseconds, resuming after a signal. */
void child_sleep_ms(int ms);

/*
 * Finds the program to run: `name` itself when it holds a '/' (it must be executable), or
 * else the first executable `name` in a directory of PATH. Writes it to path (len bytes).
 * Returns 0, or -1 with a message on stderr naming `package`, the Debian package that holds
 * it. Called before the fork: a PATH search may allocate, which a child of a threaded process
 * must not do before its exec.
 */
int child_find_program(const char *name, const char *package, char *path, size_t len);

/*
 * Starts `path` with argv (argv[0] first, NULL-ended) as a child, its standard output and
 * error appended to the file `log` (NULL: /dev/null, for a server that writes a log of its
 * own). Never ours: a server left behind by a test killed at its time limit would hold the
 * harness's pipe open, and the harness would wait for it forever. The child dies with the
 * test (SIGKILL, PR_SET_PDEATHSIG): a test that crashes or is killed leaves no server behind.
 * The kernel sends it when the thread that forked ends, not the process: call this from the
 * thread that lives as long as the program (every test does, from its main thread). Between
 * the fork and the exec the child only calls prctl, getppid, dup2, execv and _exit. Returns
 * its PID, or -1.
 */
pid_t child_spawn(const char *path, const char *const *argv, const char *log);

/*
 * Waits for the child *pid to be ready: asks ready(arg) every poll_ms, for wait_ms at most.
 * Returns 0 once it says true. Returns -1 when the child exits meanwhile (its port was
 * taken, say: *pid becomes -1, and the caller may try another port) or when wait_ms runs out
 * (the child is stopped first, as child_stop does).
 */
int child_wait_ready(pid_t *pid, bool (*ready)(const void *arg), const void *arg, int poll_ms,
                     int wait_ms);

/*
 * Stops the child *pid: SIGCONT (a frozen process cannot act on SIGTERM), SIGTERM, and
 * SIGKILL when it is still there after wait_ms; reaps it and sets *pid to -1. Returns 0, or
 * -1 when it was not running.
 */
int child_stop(pid_t *pid, int wait_ms);

/* Kills the child *pid with SIGKILL (no shutdown: a crash), reaps it, sets *pid to -1.
 * Returns 0, or -1 when it was not running. */
int child_kill(pid_t *pid);

/* Freezes the child (SIGSTOP): it keeps its ports and connections but answers nothing, as a
 * hung server does. child_thaw (SIGCONT) resumes it. 0, or -1 when it is not running. */
int child_freeze(pid_t pid);
int child_thaw(pid_t pid);

#endif
