/*
 * sha1.h - SHA-1 of a buffer as 40 lowercase hex digits.
 *
 * Only for naming Lua scripts: Redis caches a script under the SHA-1 of its text and EVALSHA
 * runs it by that name, so knowing the SHA-1 up front lets the first call be an EVALSHA.
 * SHA-1 is broken for signatures; here it is just the name Redis chose.
 */
#ifndef LOCK_SHA1_H
#define LOCK_SHA1_H

#include <stddef.h>

#define LOCK__SHA1_HEX_LEN 40

/* Writes the SHA-1 of data[0..len) into out as 40 hex digits and a NUL. */
void lock__sha1_hex(const void *data, size_t len, char out[LOCK__SHA1_HEX_LEN + 1]);

#endif
