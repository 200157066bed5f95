/*
 * request.c - strict parsing and validation of what clients send. Pure code: no I/O.
 *
 * Bodies: jansson parses the exact bytes received (json_loadb with the length) with
 *   JSON_REJECT_DUPLICATES  {"count":1,"count":2} is refused, not "last one wins";
 *   JSON_DECODE_ANY         so that "5" or "[]" parse and we can say "body must be a JSON
 *                           object" instead of echoing jansson's "'[' or '{' expected";
 * and without
 *   JSON_DISABLE_EOF_CHECK  so anything after the object ("{...} x", "{}{}") is refused;
 *   JSON_DECODE_INT_AS_REAL so 1 stays an integer and 1.0 / 1e0 stay reals, which we refuse:
 *                           a count of 1.5 must not become 1;
 * and with
 *   JSON_ALLOW_NUL          because "\u0000" inside a string is valid JSON: a mode that holds
 *                           one names no mode (400 unknown_mode), checked with the string's
 *                           length, never as a C string that would stop at the NUL. A key
 *                           holding one is refused (400 bad_request): jansson cannot store it,
 *                           and no field's name has one.
 * jansson also refuses invalid UTF-8 and integers beyond int64. A raw NUL byte is refused
 * before parsing (JSON has no place for one, and jansson's message for it is obscure).
 *
 * Then the checks, in this order, and the first failure is the detail of the 400:
 *   the body is an object; every key is a known field; each known field is present and of
 *   its type and range. Integers must be JSON integers: jansson gives a real for 1.0 and 1e0.
 *
 * Details are built for a JSON answer and a log line: one line, valid UTF-8 (a client's key
 * is shown only up to a character boundary, control characters as '?'), and jansson's own
 * texts, which may quote raw bytes of the body, are reduced to printable ASCII.
 */
#include "service/http/request.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define REQUEST__KEY_SHOWN 48 /* bytes of a client's key shown in a detail */
#define REQUEST__IDEM_MAX 128

typedef struct int_field {
    const char *name;
    int64_t min, max;
} int_field;

static const int_field goods_id_field = {"goods_id", 1, INT64_MAX};
static const int_field count_field = {"count", 1, REQUEST_MAX_COUNT};
static const int_field stock_field = {"stock", 0, REQUEST_MAX_STOCK};

static const char *const deduct_keys[] = {"goods_id", "count", "mode", NULL};
static const char *const reset_keys[] = {"goods_id", "stock", NULL};
static const char *const order_keys[] = {"items", "mode", NULL};
static const char *const order_item_keys[] = {"goods_id", "count", NULL};

/* The integer fields of one body kind (deduct_ints also an order item's), in the order they
 * are read (get_ints), and for naming the field of an out-of-range integer that jansson
 * itself refused (see overflow_detail). */
static const int_field *const deduct_ints[] = {&goods_id_field, &count_field, NULL};
static const int_field *const reset_ints[] = {&goods_id_field, &stock_field, NULL};

/* Length of the longest prefix of s[0..n) that ends on a UTF-8 character boundary, so that
 * cutting a text there never leaves half a character (which would make the detail invalid
 * UTF-8, and jansson would refuse to put it in the answer). */
static size_t utf8_cut(const char *s, size_t n)
{
    size_t lead = n;
    unsigned char c;
    size_t want;

    /* Step back over continuation bytes (10xxxxxx) to the last character's first byte. */
    while (lead > 0 && ((unsigned char)s[lead - 1] & 0xc0) == 0x80)
        lead--;
    if (lead == 0)
        return 0;
    lead--;
    c = (unsigned char)s[lead];
    want = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    return n - lead >= want ? n : lead;
}

/* The bytes of the UTF-8 character at s[0..n), or 0 when none starts there (a stray
 * continuation byte, a lead byte whose continuation is missing). */
static size_t utf8_char(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    size_t want = c < 0x80 ? 1 : c >= 0xf8 ? 0 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;

    if (want == 0 || want > n)
        return 0;
    for (size_t i = 1; i < want; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            return 0;
    return want;
}

const char *request_quote(char *buf, size_t len, const char *text, size_t text_len)
{
    size_t o = 0, i = 0;

    if (len < 8) {
        if (len > 0)
            buf[0] = '\0';
        return buf;
    }
    buf[o++] = '"';
    while (i < text_len) {
        unsigned char c = (unsigned char)text[i];
        size_t take =
            c < 0x20 || c == 0x7f || c == '"' || c == '\\' ? 1 : utf8_char(text + i, text_len - i);
        char piece[8];
        size_t n;

        if (c == '"' || c == '\\')
            n = (size_t)snprintf(piece, sizeof(piece), "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            n = (size_t)snprintf(piece, sizeof(piece), "\\u%04x", c);
        else if (take == 0)
            n = (size_t)snprintf(piece, sizeof(piece), "\\x%02x", c);
        else
            n = (size_t)snprintf(piece, sizeof(piece), "%.*s", (int)take, text + i);
        if (o + n + 5 > len) { /* room for '...', the quote and the NUL */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(buf + o, piece, n);
        o += n;
        i += take > 0 ? take : 1;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* printf into detail, then make sure a cut did not split a UTF-8 character. */
__attribute__((format(printf, 3, 4))) static void set_detail(char *detail, size_t len,
                                                             const char *fmt, ...)
{
    va_list ap;
    int n;

    if (detail == NULL || len == 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(detail, len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        detail[0] = '\0';
        return;
    }
    if ((size_t)n >= len)
        detail[utf8_cut(detail, len - 1)] = '\0';
}

/* A client's key for a detail: control characters as '?', at most REQUEST__KEY_SHOWN bytes
 * cut on a character boundary, with "..." when cut. jansson has checked it is UTF-8. */
static const char *show_key(char *buf, size_t len, const char *key)
{
    size_t n = strlen(key), keep = n, o = 0;

    if (keep > REQUEST__KEY_SHOWN)
        keep = utf8_cut(key, REQUEST__KEY_SHOWN);
    if (keep + 4 > len)
        keep = len > 4 ? utf8_cut(key, len - 4) : 0;
    for (size_t i = 0; i < keep; i++) {
        unsigned char c = (unsigned char)key[i];
        buf[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (keep < n && len >= 4) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* jansson's error text as printable ASCII: it may quote bytes of the body ("near '\xff'"). */
static const char *ascii(char *buf, size_t len, const char *text)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p >= 0x20 && *p < 0x7f) {
            if (o + 1 >= len)
                break;
            buf[o++] = (char)*p;
        } else {
            if (o + 4 >= len)
                break;
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 0x0f];
        }
    }
    buf[o] = '\0';
    return buf;
}

static void range_detail(const int_field *f, char *detail, size_t len)
{
    set_detail(detail, len, "%s must be an integer from %lld to %lld", f->name, (long long)f->min,
               (long long)f->max);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r'; /* JSON's whitespace */
}

/*
 * Finds the object key whose closing quote is body[end - 1] and decodes it into key.
 * jansson reports the offset just past the token it stopped at; for a duplicate key that
 * token is the key itself. Returns 0, or -1 when body[end - 1] does not close a key.
 */
static int key_ending_at(const char *body, size_t end, char *key, size_t keylen)
{
    json_t *s = NULL;
    size_t start;
    int rc = -1;

    if (end < 2 || body[end - 1] != '"')
        return -1;
    /* Walk back to the opening quote: a quote preceded by an odd number of backslashes is
     * escaped and part of the key. */
    for (start = end - 1; start-- > 0;) {
        if (body[start] != '"')
            continue;
        size_t slashes = 0;
        while (slashes < start && body[start - 1 - slashes] == '\\')
            slashes++;
        if (slashes % 2 == 0)
            break;
    }
    if (start == (size_t)-1)
        return -1;
    /* Let jansson undo the escapes: the token was lexed as a valid string already. */
    s = json_loadb(body + start, end - start, JSON_DECODE_ANY, NULL);
    if (!json_is_string(s))
        goto out;
    snprintf(key, keylen, "%s", json_string_value(s));
    rc = 0;
out:
    json_decref(s);
    return rc;
}

/*
 * jansson refused a number (too big an integer, or a real beyond double). When the number
 * is the value of one of this body's integer fields ("goods_id": 9223372036854775808), the
 * detail is that field's rule, like any other out-of-range value. Returns 0 when it could
 * tell, else -1 (the caller then gives jansson's text). It looks only at the text before
 * the number, so {"x":{"count":1e999}} also says "count must be ...": still a 400 that
 * names a real fault, where the unknown field 'x' would have been reported first had the
 * body parsed.
 */
static int overflow_detail(const char *body, size_t end, const int_field *const *ints, char *detail,
                           size_t len)
{
    char key[64];
    size_t i = end;

    /* Back over the number token, the blanks, the ':' and the blanks before the key. */
    while (i > 0 && body[i - 1] != '\0' && strchr("0123456789+-.eE", body[i - 1]) != NULL)
        i--;
    if (i == end)
        return -1;
    while (i > 0 && is_space(body[i - 1]))
        i--;
    if (i == 0 || body[i - 1] != ':')
        return -1;
    i--;
    while (i > 0 && is_space(body[i - 1]))
        i--;
    if (key_ending_at(body, i, key, sizeof(key)) < 0)
        return -1;
    for (size_t k = 0; ints[k] != NULL; k++) {
        if (strcmp(key, ints[k]->name) == 0) {
            range_detail(ints[k], detail, len);
            return 0;
        }
    }
    return -1;
}

/*
 * Parses body[0..len) into a JSON object. Returns it (the caller decrefs), or NULL with
 * detail filled.
 */
static json_t *load_object(const char *body, size_t len, const int_field *const *ints, char *detail,
                           size_t dlen)
{
    json_error_t error;
    json_t *root = NULL;
    char text[sizeof(error.text) * 4], key[96], shown[REQUEST__KEY_SHOWN + 4];
    size_t i;

    if (body == NULL)
        len = 0;
    for (i = 0; i < len && is_space(body[i]); i++)
        ;
    if (i == len) {
        set_detail(detail, dlen, "body is empty: expected a JSON object");
        return NULL;
    }
    if (memchr(body, '\0', len) != NULL) {
        set_detail(detail, dlen, "invalid JSON: the body contains a NUL byte");
        return NULL;
    }

    root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &error);
    if (root == NULL) {
        size_t pos = error.position >= 0 ? (size_t)error.position : 0;
        if (pos > len)
            pos = len;
        switch (json_error_code(&error)) {
        case json_error_duplicate_key:
            if (key_ending_at(body, pos, key, sizeof(key)) == 0) {
                set_detail(detail, dlen, "duplicate key '%s'", show_key(shown, sizeof(shown), key));
                return NULL;
            }
            break;
        case json_error_numeric_overflow:
            if (overflow_detail(body, pos, ints, detail, dlen) == 0)
                return NULL;
            break;
        case json_error_null_byte_in_key:
            set_detail(detail, dlen, "a key contains \\u0000: no field is named so");
            return NULL;
        default:
            break;
        }
        set_detail(detail, dlen, "invalid JSON: %s at line %d column %d",
                   ascii(text, sizeof(text), error.text), error.line, error.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        set_detail(detail, dlen, "body must be a JSON object");
        return NULL;
    }
    return root;
}

/* Every key of obj must be one of `allowed` (NULL-terminated). Returns 0 or -1 + detail. */
static int check_keys(json_t *obj, const char *const *allowed, char *detail, size_t dlen)
{
    const char *key;
    json_t *value;
    char shown[REQUEST__KEY_SHOWN + 4];

    json_object_foreach(obj, key, value)
    {
        size_t i = 0;
        while (allowed[i] != NULL && strcmp(allowed[i], key) != 0)
            i++;
        if (allowed[i] == NULL) {
            set_detail(detail, dlen, "unknown field '%s'", show_key(shown, sizeof(shown), key));
            return -1;
        }
    }
    return 0;
}

/* Reads the required integer field f of obj. Returns 0, or -1 with detail filled. */
static int get_int(json_t *obj, const int_field *f, int64_t *out, char *detail, size_t dlen)
{
    json_t *v = json_object_get(obj, f->name);
    json_int_t i;

    if (v == NULL) {
        set_detail(detail, dlen, "missing field '%s'", f->name);
        return -1;
    }
    /* A real (1.0, 1e0, 1.5), a string ("1"), true/false, null, an array or an object: all
     * refused with the same rule, which says what to send instead. */
    if (!json_is_integer(v))
        goto bad;
    i = json_integer_value(v);
    if (i < f->min || i > f->max)
        goto bad;
    *out = (int64_t)i;
    return 0;
bad:
    range_detail(f, detail, dlen);
    return -1;
}

/* Reads the required integer fields fields[] (NULL-terminated) of obj into *out[i], in order:
 * the first fault is the one reported. Returns 0, or -1 with detail filled. */
static int get_ints(json_t *obj, const int_field *const *fields, int64_t *const *out, char *detail,
                    size_t dlen)
{
    for (size_t i = 0; fields[i] != NULL; i++)
        if (get_int(obj, fields[i], out[i], detail, dlen) < 0)
            return -1;
    return 0;
}

/* The start of every body's parse: the object (load_object, `ints` naming the integer fields
 * for an overflow) whose every key is one of `keys`. Returns it (the caller passes it to
 * close_body), or NULL with detail filled. */
static json_t *open_body(const char *body, size_t len, const char *const *keys,
                         const int_field *const *ints, char *detail, size_t dlen)
{
    json_t *root = load_object(body, len, ints, detail, dlen);

    if (root != NULL && check_keys(root, keys, detail, dlen) < 0) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* The end of every body's parse: frees root (NULL is fine) and, when rc < 0, clears
 * out[0..size) so that nothing half-parsed leaks to a caller that forgets to check.
 * Returns rc. */
static int close_body(json_t *root, int rc, void *out, size_t size)
{
    json_decref(root);
    if (rc < 0 && out != NULL)
        memset(out, 0, size);
    return rc;
}

/* Reads the optional "mode" string of obj into mode (REQUEST_MODE_MAX bytes). Returns 0, or
 * -1 with detail filled when it is not a string. */
static int get_mode(json_t *obj, bool *has_mode, char *mode, char *shown, char *detail, size_t dlen)
{
    json_t *v = json_object_get(obj, "mode");

    if (v == NULL)
        return 0;
    if (!json_is_string(v)) {
        set_detail(detail, dlen, "mode must be a string");
        return -1;
    }
    *has_mode = true;
    request_quote(shown, REQUEST_SHOWN_MAX, json_string_value(v), json_string_length(v));
    /* A name too long to be any mode's, or holding a NUL ("redis\u0000x" must not read as
     * "redis"), stays empty: the caller answers unknown_mode. */
    if (json_string_length(v) < REQUEST_MODE_MAX &&
        memchr(json_string_value(v), '\0', json_string_length(v)) == NULL)
        memcpy(mode, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

int request_parse_deduct(const char *body, size_t len, deduct_request *out, char *detail,
                         size_t detail_len)
{
    int64_t *const ints[] = {&out->goods_id, &out->count};
    json_t *root;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    root = open_body(body, len, deduct_keys, deduct_ints, detail, detail_len);
    if (root != NULL && get_ints(root, deduct_ints, ints, detail, detail_len) == 0 &&
        get_mode(root, &out->has_mode, out->mode, out->mode_shown, detail, detail_len) == 0)
        rc = 0;
    return close_body(root, rc, out, sizeof(*out));
}

/* Prefixes detail with "items[i]: ", for a fault found inside one item. */
static void item_detail(size_t i, char *detail, size_t dlen)
{
    char inner[256];

    snprintf(inner, sizeof(inner), "%s", detail);
    set_detail(detail, dlen, "items[%zu]: %s", i, inner);
}

/* Reads item i of the items array into *out: an object with exactly goods_id and count.
 * Returns 0, or -1 with detail filled. */
static int get_item(json_t *v, size_t i, cart_item *out, char *detail, size_t dlen)
{
    int64_t *const ints[] = {&out->goods_id, &out->count};

    if (!json_is_object(v)) {
        set_detail(detail, dlen, "items[%zu] must be an object {\"goods_id\":..,\"count\":..}", i);
        return -1;
    }
    if (check_keys(v, order_item_keys, detail, dlen) < 0 ||
        get_ints(v, deduct_ints, ints, detail, dlen) < 0) {
        item_detail(i, detail, dlen);
        return -1;
    }
    return 0;
}

int request_parse_order(const char *body, size_t len, order_request *out, char *detail,
                        size_t detail_len)
{
    json_t *root, *items, *v;
    size_t i;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    /* deduct_ints: an items[i] field that overflows is named as its own rule. */
    root = open_body(body, len, order_keys, deduct_ints, detail, detail_len);
    if (root == NULL)
        goto out;
    items = json_object_get(root, "items");
    if (items == NULL) {
        set_detail(detail, detail_len, "missing field 'items'");
        goto out;
    }
    if (!json_is_array(items) || json_array_size(items) < 1 ||
        json_array_size(items) > REQUEST_MAX_ITEMS) {
        set_detail(detail, detail_len, "items must be an array of 1 to %d items",
                   REQUEST_MAX_ITEMS);
        goto out;
    }
    json_array_foreach(items, i, v)
    {
        if (get_item(v, i, &out->items[i], detail, detail_len) < 0)
            goto out;
        /* Each goods once: two items of one goods would be one item with the sum of their
         * counts, and a cart that names a goods twice is more likely a client's mistake. */
        for (size_t k = 0; k < i; k++) {
            if (out->items[k].goods_id == out->items[i].goods_id) {
                set_detail(detail, detail_len, "items[%zu]: goods_id %lld is already items[%zu]", i,
                           (long long)out->items[i].goods_id, k);
                goto out;
            }
        }
        out->n_items = i + 1;
    }
    if (get_mode(root, &out->has_mode, out->mode, out->mode_shown, detail, detail_len) < 0)
        goto out;
    rc = 0;
out:
    return close_body(root, rc, out, sizeof(*out));
}

int request_parse_reset(const char *body, size_t len, reset_request *out, char *detail,
                        size_t detail_len)
{
    int64_t *const ints[] = {&out->goods_id, &out->stock};
    json_t *root;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    root = open_body(body, len, reset_keys, reset_ints, detail, detail_len);
    if (root != NULL && get_ints(root, reset_ints, ints, detail, detail_len) == 0)
        rc = 0;
    return close_body(root, rc, out, sizeof(*out));
}

int request_parse_goods_id(const char *text, int64_t *out)
{
    int64_t v = 0;

    /* No leading zero: one spelling per goods (as in JSON, where 01 is not a number), and
     * "0" is out of range anyway. */
    if (text == NULL || text[0] < '1' || text[0] > '9')
        return -1;
    for (const char *p = text; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p - '0', &v))
            return -1;
    }
    *out = v;
    return 0;
}

bool request_idempotency_key_valid(const char *key)
{
    size_t n = 0;

    if (key == NULL)
        return false;
    for (; key[n] != '\0'; n++) {
        char c = key[n];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok || n >= REQUEST__IDEM_MAX)
            return false;
    }
    return n >= 1;
}

static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

bool request_content_type_is_json(const char *value)
{
    static const char type[] = "application/json";
    const char *p;

    if (value == NULL)
        return false;
    p = skip_blanks(value);
    if (strncasecmp(p, type, sizeof(type) - 1) != 0)
        return false;
    /* The type must end here: "application/jsonx" and "application/json-seq" are other
     * types. Parameters ("; charset=utf-8") are accepted and not checked: JSON is UTF-8. */
    p = skip_blanks(p + sizeof(type) - 1);
    return *p == '\0' || *p == ';';
}

bool request_bearer_matches(const char *authorization, const char *token)
{
    const char *given;
    size_t given_len, token_len;
    unsigned char diff;

    /* An empty expected token would match "Bearer " : never let it. */
    if (authorization == NULL || token == NULL || token[0] == '\0')
        return false;
    authorization = skip_blanks(authorization);
    if (strncasecmp(authorization, "Bearer", 6) != 0 || authorization[6] != ' ')
        return false;
    given = skip_blanks(authorization + 6);
    given_len = strlen(given);
    while (given_len > 0 && (given[given_len - 1] == ' ' || given[given_len - 1] == '\t'))
        given_len--;
    token_len = strlen(token);

    /* Constant time: every byte of the token is compared whatever differs first, so the
     * time taken says nothing about how much of a guess was right (only about lengths). */
    diff = given_len != token_len;
    for (size_t i = 0; i < token_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= g ^ (unsigned char)token[i];
    }
    return diff == 0;
}

/* ---- POST /api/lab/step ---- */

int request_parse_lab_step(const char *body, size_t len, char *id, size_t id_len, char *detail,
                           size_t detail_len)
{
    static const char *const step_keys[] = {"id", NULL};
    static const int_field *const no_ints[] = {NULL};
    json_t *root, *v;
    int rc = -1;

    id[0] = '\0';
    root = open_body(body, len, step_keys, no_ints, detail, detail_len);
    if (root == NULL)
        return -1;
    v = json_object_get(root, "id");
    if (v == NULL) {
        set_detail(detail, detail_len, "missing field 'id'");
        goto out;
    }
    /* The id's shape is the lab's (1 to 32 of A-Za-z0-9_-): a string that could be none is
     * refused here, with the rule, rather than looked for and not found. */
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= id_len ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        set_detail(detail, detail_len, "id must be a string of 1 to %zu characters of A-Za-z0-9_-",
                   id_len - 1);
        goto out;
    }
    for (const char *p = json_string_value(v); *p != '\0'; p++) {
        char c = *p;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-')) {
            set_detail(detail, detail_len,
                       "id must be a string of 1 to %zu characters of A-Za-z0-9_-", id_len - 1);
            goto out;
        }
    }
    snprintf(id, id_len, "%s", json_string_value(v));
    rc = 0;
out:
    return close_body(root, rc, NULL, 0);
}
