/*
 * log.h - one line per event on stderr, as key=value pairs:
 *   ts=2026-11-21T10:00:00.123Z level=info event=listening port=8081 instance=svc-1
 * The level is checked before the arguments are evaluated, so a disabled debug line costs
 * one comparison. Lines are written with a single write(2), so lines from concurrent
 * threads do not interleave.
 */
#ifndef SERVICE_LOG_H
#define SERVICE_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Lines below this level are dropped. Set once at start-up (before threads start). */
extern int log_min_level;

/* Parses "debug", "info", "warn" or "error" (case-insensitive); returns the level or -1. */
int log_level_parse(const char *name);

/* The name of a level ("debug" .. "error"), or "unknown"; a static string. */
const char *log_level_name(int level);

/* Writes "ts=... level=... event=<event> " followed by the formatted key=value pairs and a
 * newline, in one write(2) of at most 4096 bytes (a longer line is cut and ends in "...").
 * Newlines in the pairs become spaces. errno is preserved. Use log_event() rather than
 * calling this directly. */
void log_write(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_event(level, event, ...)                                                               \
    do {                                                                                           \
        if ((level) >= log_min_level)                                                              \
            log_write((level), (event), __VA_ARGS__);                                              \
    } while (0)

/*
 * Copies `value` into buf as a log value: unchanged when it is made only of safe characters
 * (visible ASCII except '"', '\\' and '='), otherwise in double quotes with '"' and '\\'
 * escaped, \n \r \t for those, and \xNN for other control characters and non-ASCII bytes
 * (so a line stays ASCII whatever a client sent). "" for an empty or NULL value. A value
 * that does not fit is cut and ends in ..." . Returns buf (or "" when buflen is 0), so it
 * can be an argument of log_event(LOG_INFO, "...", "detail=%s", log_quote(b, sizeof b, s)).
 */
const char *log_quote(char *buf, unsigned long buflen, const char *value);

#endif
