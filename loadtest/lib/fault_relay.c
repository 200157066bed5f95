/*
 * fault_relay.c - the relay of tests/support/relay.h as a program, for the shell tools (the
 * chaos rows, the soak, the ladder's partitions).
 *
 *   build/fault-relay LISTEN_PORT TARGET_PORT CONTROL_PORT
 *
 * Relays 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT and takes one command per line on
 * 127.0.0.1:CONTROL_PORT, answering each with "ok" or "error: why":
 *
 *   pass | delay MS | swallow | cut-reply | cut-request | drop   [match=TEXT] [count=N]
 *   triggered                  (answers the number of requests that triggered a fault)
 *
 * From bash: exec 3<>/dev/tcp/127.0.0.1/$CONTROL; echo "cut-reply count=1" >&3; read -r a <&3
 * It prints one line once it listens, and runs until SIGTERM or SIGINT (exit 0).
 */
#include "tests/support/relay.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int port_arg(const char *s)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);

    return *end == '\0' && v >= 1 && v <= 65535 && v != 2024 ? (int)v : -1;
}

/* Serves one control connection until it closes: a line in, a line out. */
static void serve(relay *r, int fd)
{
    FILE *in = fdopen(fd, "r+");
    char line[512];

    if (in == NULL) {
        close(fd);
        return;
    }
    while (!stopping && fgets(line, sizeof(line), in) != NULL) {
        const char *why = NULL;

        if (strncmp(line, "triggered", 9) == 0)
            fprintf(in, "%d\n", relay_triggered(r));
        else if (relay_command(r, line, &why) == 0)
            fputs("ok\n", in);
        else
            fprintf(in, "error: %s\n", why);
        fflush(in);
    }
    fclose(in);
}

int main(int argc, char **argv)
{
    int listen_port, target_port, control_port, control;
    struct sigaction sa = {.sa_handler = on_signal};
    relay *r = NULL;

    if (argc != 4 || (listen_port = port_arg(argv[1])) < 0 ||
        (target_port = port_arg(argv[2])) < 0 || (control_port = port_arg(argv[3])) < 0) {
        fprintf(stderr, "usage: fault-relay LISTEN_PORT TARGET_PORT CONTROL_PORT "
                        "(1-65535, never 2024)\n");
        return 2;
    }
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    control = relay_listen_loopback(control_port);
    if (control < 0) {
        fprintf(stderr, "fault-relay: cannot listen on 127.0.0.1:%d: %s\n", control_port,
                strerror(errno));
        return 1;
    }
    if (relay_start(listen_port, target_port, &r) != 0) {
        close(control);
        return 1;
    }
    printf("fault-relay: 127.0.0.1:%d -> 127.0.0.1:%d, control on 127.0.0.1:%d\n", listen_port,
           target_port, control_port);
    fflush(stdout);
    while (!stopping) {
        struct pollfd p = {.fd = control, .events = POLLIN};

        if (poll(&p, 1, 200) == 1) {
            int fd = accept4(control, NULL, NULL, SOCK_CLOEXEC);

            if (fd >= 0)
                serve(r, fd);
        }
    }
    relay_stop(r);
    close(control);
    return 0;
}
