/*
 * ports.c - a free loopback port below the ephemeral range (ports.h).
 */
#include "tests/support/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PORT_LOW 20000
#define PORT_HIGH 32767
#define PORT_DRAWS 64
#define FORBIDDEN_PORT 2024 /* never ours to use */

/* Whether 127.0.0.1:port can be bound now (nothing listens or is connected there). */
static bool port_free(int port)
{
    struct sockaddr_in addr;
    bool ok;
    int fd;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((uint16_t)port);
    ok = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    close(fd);
    return ok;
}

int support_free_port(void)
{
    static _Thread_local uint64_t x;

    if (x == 0)
        x = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ (uint64_t)clock() ^ 1;
    for (int i = 0; i < PORT_DRAWS; i++) {
        int port;

        x ^= x << 13; /* xorshift64: different draws per process, nothing more needed */
        x ^= x >> 7;
        x ^= x << 17;
        port = PORT_LOW + (int)(x % (uint64_t)(PORT_HIGH - PORT_LOW + 1));
        if (port != FORBIDDEN_PORT && port_free(port))
            return port;
    }
    return -1;
}
