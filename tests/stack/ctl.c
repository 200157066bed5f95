/*
 * ctl.c - what the stack's test programs do besides HTTP: run redis-cli and scripts/stack.sh
 * (stop, start, freeze a server of this stack, and no other), and SQL on the stack's
 * database behind the service's back.
 */
#include "tests/stack/stack_support.h"

#include <libpq-fe.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Other programs: redis-cli and the stack script
 * ------------------------------------------------------------------------------------------ */

int run_program(const char *dir, int out_fd, double timeout_s, const char *const *argv)
{
    size_t n = 0;
    char **copy = NULL;
    pid_t pid;
    int status = 0, rc = -1;

    /* execvp() wants char *const[]; copy before fork(), so the child allocates nothing. */
    while (argv[n] != NULL)
        n++;
    copy = calloc(n + 1, sizeof(*copy));
    if (copy == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((copy[i] = strdup(argv[i])) == NULL)
            goto out;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0)
        goto out;
    if (pid == 0) {
        if (dir != NULL && chdir(dir) != 0)
            _exit(126);
        if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0)
            _exit(126);
        execvp(copy[0], copy);
        _exit(127);
    }

    double deadline = now_s() + timeout_s;
    for (;;) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (done < 0)
            goto out;
        if (now_s() > deadline) {
            kill(pid, SIGKILL); /* our own child, by its pid */
            waitpid(pid, &status, 0);
            fprintf(stderr, "%s: still running after %.0f s, killed\n", argv[0], timeout_s);
            goto out;
        }
        usleep(20 * 1000);
    }
    if (WIFEXITED(status))
        rc = WEXITSTATUS(status);
out:
    for (size_t i = 0; i < n; i++)
        free(copy[i]);
    free(copy);
    return rc;
}

int redis_cli_out(char *out, size_t out_len, const char *a1, const char *a2, const char *a3,
                  const char *a4)
{
    const char *argv[] = {"redis-cli", "-h", "127.0.0.1", "-p", g_env.redis_port,
                          a1,          a2,   a3,          a4,   NULL};
    FILE *capture = tmpfile();
    int rc;

    if (out != NULL && out_len > 0)
        out[0] = '\0';
    if (capture == NULL)
        return -1;
    rc = run_program(NULL, fileno(capture), 10.0, argv);
    if (out != NULL && out_len > 0) {
        rewind(capture);
        if (fgets(out, (int)out_len, capture) == NULL)
            out[0] = '\0';
        out[strcspn(out, "\r\n")] = '\0';
    }
    fclose(capture);
    return rc;
}

int redis_cli(const char *a1, const char *a2, const char *a3, const char *a4)
{
    return redis_cli_out(NULL, 0, a1, a2, a3, a4);
}

int stack_script(const char *command)
{
    const char *argv[] = {"scripts/stack.sh", command, NULL};
    printf("    running scripts/stack.sh %s\n", command);
    return run_program(NULL, -1, 60.0, argv);
}

int sql_run(const char *sql, int n, long long a, long long b, long *rows, long long *value,
            char *err, size_t errlen)
{
    char conninfo[256], text_a[24], text_b[24];
    const char *const values[2] = {text_a, text_b};
    PGconn *conn = NULL;
    PGresult *res = NULL;
    int rc = -1;

    snprintf(conninfo, sizeof(conninfo),
             "host=127.0.0.1 port=%s dbname=stock user=stock connect_timeout=5", g_env.pg_port);
    snprintf(text_a, sizeof(text_a), "%lld", a);
    snprintf(text_b, sizeof(text_b), "%lld", b);
    conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect with '%s': %s", conninfo, PQerrorMessage(conn));
        goto out;
    }
    res = PQexecParams(conn, sql, n, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != (value != NULL ? PGRES_TUPLES_OK : PGRES_COMMAND_OK)) {
        snprintf(err, errlen, "%s: %s", sql, PQerrorMessage(conn));
        goto out;
    }
    if (rows != NULL)
        *rows = strtol(PQcmdTuples(res), NULL, 10);
    if (value != NULL)
        *value = PQntuples(res) > 0 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    rc = 0;
out:
    PQclear(res);
    PQfinish(conn);
    return rc;
}

void sql_exec(const char *sql, long long a, long long b)
{
    char err[512];
    long rows = 0;

    if (sql_run(sql, 2, a, b, &rows, NULL, err, sizeof(err)) != 0)
        fail_msg("SQL on the stack's database: %s", err);
    if (rows != 1)
        fail_msg("SQL on the stack's database: '%s' ($1=%lld, $2=%lld) changed %ld rows, want 1",
                 sql, a, b, rows);
}

long long sql_value(const char *sql, int n, long long a)
{
    char err[512];
    long long value = 0;

    if (sql_run(sql, n, a, 0, NULL, &value, err, sizeof(err)) != 0)
        fail_msg("SQL on the stack's database: %s", err);
    return value;
}
