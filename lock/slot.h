/*
 * slot.h - where a key lives in a Redis Cluster: its hash slot, and the redirections a node
 * answers with when the key is elsewhere.
 *
 * A cluster splits the key space into 16384 slots, each served by one master. A key's slot is
 * CRC16 (the XMODEM variant) of the key, modulo 16384; when the key holds a hash tag (the text
 * between its first '{' and the first '}' after it, if not empty), only the tag is hashed, so
 * that related keys share a slot. The lock's keys use one: "lock:goods:{N}" and its fencing
 * counter "lock:goods:{N}:fence" hash the same "N", and a script that touches both never spans
 * two slots (a cluster refuses that with CROSSSLOT).
 *
 * A node asked for a key of a slot it does not serve answers an error: "MOVED <slot>
 * <host>:<port>" (the slot lives there now: update the map) or "ASK <slot> <host>:<port>" (the
 * slot is being migrated: ask there once, after ASKING, and keep the map).
 *
 * Pure code: no I/O, no allocation.
 */
#ifndef LOCK_SLOT_H
#define LOCK_SLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOCK__SLOTS 16384

/* CRC16-XMODEM (polynomial 0x1021, initial value 0) of buf[0..len). */
uint16_t lock__crc16(const char *buf, size_t len);

/* The slot of key[0..len): 0 .. LOCK__SLOTS-1. */
int lock__key_slot(const char *key, size_t len);

/* Whether key[0..len) carries a hash tag: a non-empty text between its first '{' and the first
 * '}' after it. Then key + any suffix hashes to the same slot as key. */
bool lock__key_has_tag(const char *key, size_t len);

typedef struct lock__redirect {
    bool ask;       /* ASK (once) rather than MOVED (for good) */
    int slot;       /* 0 .. LOCK__SLOTS-1 */
    char host[256]; /* as the node wrote it */
    int port;       /* 1 .. 65535 */
} lock__redirect;

/*
 * Parses a Redis error text as a redirection. Returns 0 with *out filled for a well-formed
 * "MOVED slot host:port" or "ASK slot host:port" (an IPv6 host is everything before the last
 * ':'); -1 for anything else (another error, a slot or port out of range, a host too long).
 */
int lock__parse_redirect(const char *err, lock__redirect *out);

#endif
