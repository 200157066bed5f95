/*
 * child.c - a server a test starts as its own child (see child.h).
 */
#include "tests/support/child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void child_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int child_find_program(const char *name, const char *package, char *path, size_t len)
{
    const char *dirs = getenv("PATH");
    char copy[1024];
    char *dir, *save = NULL;

    if (strchr(name, '/') != NULL) {
        snprintf(path, len, "%s", name);
        if (access(path, X_OK) == 0)
            return 0;
    } else {
        snprintf(copy, sizeof(copy), "%s", dirs != NULL ? dirs : "/usr/bin:/bin");
        for (dir = strtok_r(copy, ":", &save); dir != NULL; dir = strtok_r(NULL, ":", &save)) {
            snprintf(path, len, "%s/%s", dir, name);
            if (access(path, X_OK) == 0)
                return 0;
        }
    }
    fprintf(stderr, "%s not found (install %s)\n", name, package);
    return -1;
}

pid_t child_spawn(const char *path, const char *const *argv, const char *log)
{
    int fd = -1;
    pid_t pid, parent = getpid();

    if (log == NULL)
        log = "/dev/null";
    if ((fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644)) < 0) {
        fprintf(stderr, "%s: %s\n", log, strerror(errno));
        return -1;
    }
    fflush(stdout); /* what is buffered here would be written twice, by both processes */
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        /* Killed when the test dies (a crash, a harness's time limit): its teardown, which
         * stops the server, never runs then. The setting outlives the exec. Should the test
         * have died before it was made, the child has a new parent already: it goes at once. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(125);
        if (fd >= 0 && (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0))
            _exit(126);
        /* execv takes char *const[]: it does not change the strings. */
        execv(path, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    if (fd >= 0)
        close(fd);
    return pid < 0 ? -1 : pid;
}

int child_wait_ready(pid_t *pid, bool (*ready)(const void *arg), const void *arg, int poll_ms,
                     int wait_ms)
{
    for (int waited = 0; waited < wait_ms; waited += poll_ms) {
        int status;

        if (waitpid(*pid, &status, WNOHANG) == *pid) {
            *pid = -1;
            return -1;
        }
        if (ready(arg))
            return 0;
        child_sleep_ms(poll_ms);
    }
    child_stop(pid, 5000);
    return -1;
}

int child_stop(pid_t *pid, int wait_ms)
{
    int status;

    if (*pid <= 0)
        return -1;
    kill(*pid, SIGCONT);
    kill(*pid, SIGTERM);
    for (int waited = 0; waitpid(*pid, &status, WNOHANG) != *pid; waited += 10) {
        if (waited == wait_ms)
            kill(*pid, SIGKILL);
        child_sleep_ms(10);
    }
    *pid = -1;
    return 0;
}

int child_kill(pid_t *pid)
{
    int status;

    if (*pid <= 0)
        return -1;
    kill(*pid, SIGKILL);
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR)
        ;
    *pid = -1;
    return 0;
}

int child_freeze(pid_t pid)
{
    return pid > 0 ? kill(pid, SIGSTOP) : -1;
}

int child_thaw(pid_t pid)
{
    return pid > 0 ? kill(pid, SIGCONT) : -1;
}
