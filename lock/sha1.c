/*
 * sha1.c - SHA-1 (FIPS 180-4, section 6.1), written for clarity rather than speed: it hashes
 * three short scripts once per process.
 *
 * The message is processed in 64-byte blocks. The last block(s) carry the padding: a 0x80
 * byte, zeros, and the message length in bits as a 64-bit big-endian number, so that the
 * total is a multiple of 64 bytes.
 */
#include "lock/sha1.h"

#include <stdint.h>
#include <string.h>

typedef struct sha1_state {
    uint32_t h[5];
} sha1_state;

static uint32_t rol32(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

/* Mixes one 64-byte block into the state. */
static void sha1_block(sha1_state *st, const uint8_t block[64])
{
    uint32_t w[80];
    uint32_t a, b, c, d, e;

    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
               (uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);

    a = st->h[0];
    b = st->h[1];
    c = st->h[2];
    d = st->h[3];
    e = st->h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k, t;

        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    st->h[0] += a;
    st->h[1] += b;
    st->h[2] += c;
    st->h[3] += d;
    st->h[4] += e;
}

void lock__sha1_hex(const void *data, size_t len, char out[LOCK__SHA1_HEX_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    sha1_state st = {{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0}};
    const uint8_t *p = data;
    uint8_t tail[128];
    size_t full = len / 64 * 64;
    size_t rest = len - full;
    size_t tail_len = rest < 56 ? 64 : 128; /* room for 0x80 and the 8-byte length? */
    uint64_t bits = (uint64_t)len * 8;

    for (size_t off = 0; off < full; off += 64)
        sha1_block(&st, p + off);

    memset(tail, 0, sizeof(tail));
    memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    for (int i = 0; i < 8; i++)
        tail[tail_len - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha1_block(&st, tail);
    if (tail_len == 128)
        sha1_block(&st, tail + 64);

    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 8; j++)
            out[8 * i + j] = hex[(st.h[i] >> (28 - 4 * j)) & 0xf];
    out[LOCK__SHA1_HEX_LEN] = '\0';
}
