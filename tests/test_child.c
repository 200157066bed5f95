/*
 * test_child.c - the servers a test starts (tests/support/child.c) die with the test: a test
 * program that crashes runs no teardown, and its redis-server (or etcd, or ZooKeeper's JVM)
 * would otherwise live on, an orphan holding its port and its directory.
 *
 * A process of the test (a fork of this one) starts a child with child_spawn, as a test
 * starts its server (here `sleep`, which would outlive it by a minute), says its PID, and is
 * killed with SIGKILL, as a crash or a harness's time limit ends it. The child must be gone
 * within a second. A pure test: no server, about 0.1 s.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/child.h"

/* Whether process pid runs: it exists and is not a zombie (an orphan that died is reaped by
 * whichever process adopted it, which may take its time). */
static bool running(pid_t pid)
{
    char path[64], state = 'X';
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return false;
    if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
        state = 'X';
    fclose(f);
    return state != 'Z' && state != 'X';
}

/* The test's stand-in: starts the child, writes its PID to `out`, waits for a byte on `in`
 * (the test has seen the child run), then dies as a crash does. */
static void stand_in(int out, int in)
{
    char path[256], go;
    const char *const argv[] = {"sleep", "60", NULL};
    pid_t child = -1;

    if (child_find_program("sleep", "coreutils", path, sizeof(path)) == 0)
        child = child_spawn(path, argv, NULL);
    if (write(out, &child, sizeof(child)) != sizeof(child) || read(in, &go, 1) != 1)
        _exit(1);
    raise(SIGKILL);
}

static void test_child_dies_with_the_test(void **state)
{
    int to_test[2], to_stand_in[2];
    pid_t stand, child = -1;
    bool ran, gone = false;
    int status;

    (void)state;
    assert_int_equal(pipe(to_test), 0);
    assert_int_equal(pipe(to_stand_in), 0);
    stand = fork();
    assert_true(stand >= 0);
    if (stand == 0)
        stand_in(to_test[1], to_stand_in[0]);
    assert_int_equal(read(to_test[0], &child, sizeof(child)), sizeof(child));
    assert_true(child > 0);
    ran = running(child);
    assert_int_equal(write(to_stand_in[1], "x", 1), 1);
    assert_int_equal(waitpid(stand, &status, 0), stand);
    for (int waited = 0; waited <= 1000 && !gone; waited += 10) {
        gone = !running(child);
        if (!gone)
            child_sleep_ms(10);
    }
    if (!gone)
        kill(child, SIGKILL); /* what the test is about: an orphan; not left behind here */
    for (int i = 0; i < 2; i++) {
        close(to_test[i]);
        close(to_stand_in[i]);
    }
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_true(ran);
    assert_true(gone);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_dies_with_the_test),
    };

    return cmocka_run_group_tests_name("child", tests, NULL, NULL);
}
