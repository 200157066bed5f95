/*
 * zk_server.c - a throwaway ZooKeeper for tests (see zk_server.h).
 *
 * The port comes from support_free_port() (20000-32767, below the ephemeral range). The
 * JVM is our child (child.h: fork + exec, stopped by its PID). It is ready when the
 * four-letter command "ruok" answers "imok" (the config allows it), which ZooKeeper does
 * once it serves clients.
 */
#include "tests/support/zk_server.h"
#include "tests/support/child.h"
#include "tests/support/files.h"
#include "tests/support/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define START_TRIES 3
#define READY_WAIT_MS 30000
#define STOP_WAIT_MS 5000

struct zk_server {
    char dir[64];
    char hosts[64];
    int port;
    pid_t pid;
};

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in addr;

    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((uint16_t)port);
    return addr;
}

/* Writes the server's config: standalone, loopback only, no admin HTTP server (it would
 * take port 8080), a short tick so that tests may ask for short sessions. */
static int write_config(const zk_server *s)
{
    char path[96];
    FILE *f;

    snprintf(path, sizeof(path), "%s/zoo.cfg", s->dir);
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "tickTime=200\n"
            "dataDir=%s/data\n"
            "clientPort=%d\n"
            "clientPortAddress=127.0.0.1\n"
            "minSessionTimeout=400\n"
            "maxSessionTimeout=60000\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok\n",
            s->dir, s->port);
    return fclose(f) == 0 ? 0 : -1;
}

static int spawn(zk_server *s)
{
    char java[256], config[96], logfile[96];
    const char *java_bin = getenv("JAVA");
    const char *jar = getenv("ZOOKEEPER_JAR");

    jar = jar != NULL ? jar : "/usr/share/java/zookeeper.jar";
    if (child_find_program(java_bin != NULL ? java_bin : "/usr/bin/java", "zookeeper", java,
                           sizeof(java)) != 0)
        return -1;
    if (access(jar, R_OK) != 0) {
        fprintf(stderr, "zk_server: %s not found (install zookeeper)\n", jar);
        return -1;
    }
    snprintf(config, sizeof(config), "%s/zoo.cfg", s->dir);
    snprintf(logfile, sizeof(logfile), "%s/zookeeper.log", s->dir);
    if (write_config(s) != 0)
        return -1;
    /* A small heap and the quick JIT tier: a test server starts in well under a second on an
     * idle machine this way. The jar's manifest names the jars it needs (Debian's
     * /usr/share/java/...). */
    const char *const argv[] = {"java",
                                "-Xmx256m",
                                "-XX:TieredStopAtLevel=1",
                                "-XX:+UseSerialGC",
                                "-cp",
                                jar,
                                "org.apache.zookeeper.server.ZooKeeperServerMain",
                                config,
                                NULL};
    s->pid = child_spawn(java, argv, logfile);
    return s->pid > 0 ? 0 : -1;
}

/* "ruok" answered "imok". */
static bool healthy(const void *arg)
{
    const zk_server *s = arg;
    struct sockaddr_in addr = loopback(s->port);
    struct timeval tv = {0, 500000};
    char buf[8] = {0};
    bool ok = false;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return false;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 && write(fd, "ruok", 4) == 4 &&
        read(fd, buf, 4) == 4)
        ok = memcmp(buf, "imok", 4) == 0;
    close(fd);
    return ok;
}

static int wait_ready(zk_server *s)
{
    return child_wait_ready(&s->pid, healthy, s, 50, READY_WAIT_MS);
}

int zk_server_start(zk_server **out)
{
    zk_server *s;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    s->pid = -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-zk.XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        free(s);
        return -1;
    }
    for (int i = 0; i < START_TRIES; i++) {
        s->port = support_free_port();
        if (s->port <= 0)
            continue;
        snprintf(s->hosts, sizeof(s->hosts), "127.0.0.1:%d", s->port);
        if (spawn(s) == 0 && wait_ready(s) == 0) {
            *out = s;
            return 0;
        }
    }
    fprintf(stderr, "zk_server: ZooKeeper did not start (see %s/zookeeper.log)\n", s->dir);
    zk_server_destroy(s);
    return -1;
}

const char *zk_server_hosts(const zk_server *s)
{
    return s->hosts;
}

int zk_server_port(const zk_server *s)
{
    return s->port;
}

int zk_server_stop(zk_server *s)
{
    return child_stop(&s->pid, STOP_WAIT_MS);
}

int zk_server_freeze(zk_server *s)
{
    return child_freeze(s->pid);
}

int zk_server_thaw(zk_server *s)
{
    return child_thaw(s->pid);
}

int zk_server_restart(zk_server *s)
{
    for (int i = 0; i < START_TRIES; i++) {
        if (s->pid > 0)
            return 0;
        if (spawn(s) == 0 && wait_ready(s) == 0)
            return 0;
        child_sleep_ms(200);
    }
    return -1;
}

void zk_server_destroy(zk_server *s)
{
    if (s == NULL)
        return;
    if (s->pid > 0)
        zk_server_stop(s);
    support_remove_dir(s->dir);
    free(s);
}
