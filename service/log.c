/*
 * log.c - key=value event lines on stderr.
 *
 * A line looks like
 *   ts=2026-11-21T10:00:00.123Z level=info event=listening port=8081 instance=svc-1
 * and is assembled whole in a buffer on the caller's stack, then handed to write(2) in one
 * call. POSIX makes a write of at most PIPE_BUF bytes to a pipe atomic, and Linux does not
 * interleave the bytes of one write(2) to a file or terminal either, so lines from concurrent
 * threads never mix. That is why lines are capped at LOG__LINE_MAX (== PIPE_BUF on Linux) and
 * why we do not use stdio: fprintf(stderr) may split one line into several writes.
 *
 * Values that may contain spaces, quotes or bytes from clients go through log_quote() first,
 * so that a reader (or a tool) can split every line on spaces and '=' without surprises.
 * As a last guard, log_write() replaces any newline in the caller's text by a space: one
 * event is always one line.
 */
#include "service/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "service/clock.h"

#define LOG__LINE_MAX 4096 /* bytes, newline included */

int log_min_level = LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int log_level_parse(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = LOG_DEBUG; i <= LOG_ERROR; i++) {
        /* Case-insensitive: LOG_LEVEL=DEBUG is a common way to write it. */
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    }
    return -1;
}

const char *log_level_name(int level)
{
    if (level < LOG_DEBUG || level > LOG_ERROR)
        return "unknown";
    return level_names[level];
}

/* Writes "2026-11-21T10:00:00.123Z" (24 characters) into buf; returns its length. */
static size_t timestamp(char *buf, size_t len)
{
    struct timespec now = clock_wall();
    struct tm tm;
    size_t n;

    gmtime_r(&now.tv_sec, &tm);
    n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n == 0)
        return 0;
    int m = snprintf(buf + n, len - n, ".%03ldZ", now.tv_nsec / 1000000L);
    if (m < 0 || (size_t)m >= len - n)
        return 0;
    return n + (size_t)m;
}

/* write(2) until everything is out; a partial write only happens for lines longer than
 * PIPE_BUF or on a full disk, and we would rather finish the line than lose its end. */
static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere left to report it */
        }
        buf += n;
        len -= (size_t)n;
    }
}

void log_write(int level, const char *event, const char *fmt, ...)
{
    char line[LOG__LINE_MAX];
    size_t len, head;
    int saved_errno = errno; /* so that logging never changes what the caller sees */
    va_list ap;
    char ts[32];
    int n;

    if (timestamp(ts, sizeof(ts)) == 0)
        strcpy(ts, "?");
    n = snprintf(line, sizeof(line), "ts=%s level=%s event=%s ", ts, log_level_name(level),
                 event != NULL ? event : "?");
    if (n < 0)
        goto out;
    head = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;

    va_start(ap, fmt);
    n = vsnprintf(line + head, sizeof(line) - head, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    len = head + (size_t)n;

    /* Keep room for the newline; mark a cut line with "..." so nobody trusts its end. */
    if (len > sizeof(line) - 1) {
        len = sizeof(line) - 1;
        memcpy(line + len - 3, "...", 3);
    }
    if (n == 0 && len > 0 && line[len - 1] == ' ')
        len--; /* no pairs: do not leave a trailing space */

    for (size_t i = head; i < len; i++) {
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    }
    line[len++] = '\n';
    write_all(line, len);
out:
    errno = saved_errno;
}

/* Characters that may appear in an unquoted value: visible ASCII except the ones that
 * separate pairs or start quoting. */
static bool safe_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '=';
}

/* The escaped form of byte c inside quotes, written into out (at most 5 bytes). */
static size_t escape(unsigned char c, char out[5])
{
    /* The bytes with a one-letter escape, as in JSON and C. */
    static const struct {
        unsigned char byte;
        char letter;
    } named[] = {{'"', '"'}, {'\\', '\\'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};

    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        if (c == named[i].byte) {
            out[0] = '\\';
            out[1] = named[i].letter;
            return 2;
        }
    }
    if (c < 0x20 || c >= 0x7f) {
        /* Control characters and non-ASCII bytes: the line stays plain ASCII, whatever a
         * client sent, and invalid UTF-8 cannot upset a log reader. */
        static const char hex[] = "0123456789abcdef";
        out[0] = '\\';
        out[1] = 'x';
        out[2] = hex[c >> 4];
        out[3] = hex[c & 0x0f];
        return 4;
    }
    out[0] = (char)c;
    return 1;
}

const char *log_quote(char *buf, unsigned long buflen, const char *value)
{
    size_t vlen, pos = 0;
    bool safe = true;

    if (buf == NULL || buflen == 0)
        return "";
    if (value == NULL)
        value = "";
    vlen = strlen(value);
    for (size_t i = 0; i < vlen && safe; i++)
        safe = safe_char((unsigned char)value[i]);
    if (safe && vlen > 0 && vlen < buflen) {
        memcpy(buf, value, vlen + 1);
        return buf;
    }
    if (buflen < 3) { /* not even room for "" */
        buf[0] = '\0';
        return buf;
    }

    buf[pos++] = '"';
    for (size_t i = 0; i < vlen; i++) {
        char esc[5];
        size_t n = escape((unsigned char)value[i], esc);
        /* Room for this piece, and still for the closing quote and the terminator; when
         * the value does not fit, "..." before the closing quote says it was cut. */
        bool last = i + 1 == vlen;
        size_t reserve = last ? 2 : 5; /* '"' + NUL, or '...' + '"' + NUL */
        if (pos + n + reserve > buflen) {
            if (pos + 5 <= buflen) {
                memcpy(buf + pos, "...", 3);
                pos += 3;
            }
            break;
        }
        memcpy(buf + pos, esc, n);
        pos += n;
    }
    buf[pos++] = '"';
    buf[pos] = '\0';
    return buf;
}
