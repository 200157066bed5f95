/*
 * slot.c - Redis Cluster key slots and redirections (see slot.h).
 */
#include "lock/slot.h"

#include <stdlib.h>
#include <string.h>

uint16_t lock__crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    /* Bit by bit rather than by a 256-entry table: the keys are a few dozen bytes, and the
     * loop is the definition, readable as it stands. */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

bool lock__key_has_tag(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    size_t from;

    if (open == NULL)
        return false;
    from = (size_t)(open - key) + 1;
    /* "{}" is no tag; nor is a '{' never closed. */
    return from < len && key[from] != '}' && memchr(key + from, '}', len - from) != NULL;
}

int lock__key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);

    if (open != NULL) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        /* "{}" is no tag: then the whole key is hashed. */
        if (close != NULL && close > key + from)
            return lock__crc16(key + from, (size_t)(close - (key + from))) % LOCK__SLOTS;
    }
    return lock__crc16(key, len) % LOCK__SLOTS;
}

/* Reads a decimal integer from lo to hi filling the whole of s[0..len). */
static int parse_int(const char *s, size_t len, long lo, long hi, int *out)
{
    char buf[8], *end = NULL;
    long v;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (buf[i] < '0' || buf[i] > '9')
            return -1;
    v = strtol(buf, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

int lock__parse_redirect(const char *err, lock__redirect *out)
{
    const char *p, *slot_end, *addr, *colon;
    size_t host_len;

    if (err == NULL || out == NULL)
        return -1;
    if (strncmp(err, "MOVED ", 6) == 0) {
        out->ask = false;
        p = err + 6;
    } else if (strncmp(err, "ASK ", 4) == 0) {
        out->ask = true;
        p = err + 4;
    } else {
        return -1;
    }
    slot_end = strchr(p, ' ');
    if (slot_end == NULL || parse_int(p, (size_t)(slot_end - p), 0, LOCK__SLOTS - 1, &out->slot))
        return -1;
    addr = slot_end + 1;
    colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr)
        return -1;
    host_len = (size_t)(colon - addr);
    if (host_len >= sizeof(out->host) || memchr(addr, ' ', host_len) != NULL)
        return -1;
    if (parse_int(colon + 1, strlen(colon + 1), 1, 65535, &out->port))
        return -1;
    memcpy(out->host, addr, host_len);
    out->host[host_len] = '\0';
    return 0;
}
