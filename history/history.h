/* history.h - a recorded history: operations with their invocation and completion times.
 *
 * A history file is JSON Lines (docs/history.md): one event per line, an `invoke` and later
 * its completion (`ok`, `fail`, `info`) on the same process. history_load() pairs them into
 * operations and validates every line; an operation is then one interval of time with one
 * answer, in the form the models and the search read.
 *
 * What the loader already settles, so that the search never sees it:
 *   - a completion that certainly took no effect and says nothing about the state (a deduct
 *     `fail` other than sold_out, a register `cas` fail, a read whose answer is unknown) is
 *     dropped: it constrains nothing;
 *   - an `info` completion, and an invocation never completed, become an optional operation
 *     whose completion is at +infinity: it may take effect at any instant after its
 *     invocation, or never.
 * An order (a cart over several goods) carries its goods in `items`, in the history's pool of
 * items; every other stock operation names one goods. Goods tied by orders are checked
 * together (main.c): each goods then has a slot in the group's state, written into the
 * operation (`slot`) and into each item by whoever groups them; a goods checked alone is
 * slot 0, which is what a zeroed operation says.
 * This module knows jansson and nothing else of the project. */
#ifndef HISTORY_HISTORY_H
#define HISTORY_HISTORY_H

#include <stddef.h>
#include <stdint.h>

/* +infinity, as a completion time: an operation that may take effect at any later time. */
#define HIST_TIME_INF INT64_MAX

/* STOCK and UNITS read the same events (a stock per goods); REGISTER reads Knossos's. */
enum hist_model_kind { HIST_MODEL_STOCK, HIST_MODEL_REGISTER, HIST_MODEL_UNITS };

enum hist_f {
    HIST_F_DEDUCT, /* stock: a = count; ok: b = remaining */
    HIST_F_READ,   /* stock: a = stock read; register: a = value read */
    HIST_F_RESET,  /* stock: a = new stock */
    HIST_F_WRITE,  /* register: a = value written */
    HIST_F_CAS,    /* register: a = expected, b = new */
    HIST_F_ORDER   /* stock: items; sold_out: a = the index of the item the 409 named */
};

/* An order's items: 1 to HIST_ITEMS_MAX, each goods once. */
#define HIST_ITEMS_MAX 16

struct hist_item {
    int64_t goods;
    int64_t count;
    int64_t remaining; /* the ok's; 0 when not known */
    uint32_t slot;     /* the goods' place in its group's state (above) */
};

enum hist_outcome {
    HIST_OK,       /* took effect, with the answer recorded */
    HIST_SOLD_OUT, /* deduct fail sold_out: stock was below count, nothing changed */
    HIST_UNKNOWN   /* info or never completed: optional, may take effect once or never */
};

struct hist_op {
    int64_t process;
    int64_t goods;   /* 0 in the register model and for an order (its goods are its items') */
    uint32_t slot;   /* the goods' place in its group's state (above); unused for an order */
    uint32_t nitems; /* an order's items; 0 for any other operation */
    struct hist_item *items; /* in the history's pool (struct history) */
    int64_t call;            /* invocation time */
    int64_t ret;             /* completion time, HIST_TIME_INF when unknown */
    int64_t done; /* the completion's recorded time (an info's too), HIST_TIME_INF if none */
    enum hist_f f;
    enum hist_outcome outcome;
    int64_t a, b;    /* the arguments and answer, by f (above) */
    int file;        /* index of the file (in the list given to history_load) */
    long line_call;  /* line of the invocation */
    long line_ret;   /* line of the completion, 0 when there was none */
    char answer[48]; /* the completion as recorded, for reports ("ok remaining=3", ...) */
};

struct history {
    struct hist_op *ops; /* ordered by invocation time, then by line */
    size_t n;
    struct hist_item *items; /* every order's items; the operations point into it */
    size_t nitems;
    enum hist_model_kind model;
};

/* Why a load failed: where and what. */
struct hist_error {
    const char *file; /* a name from the list given (not copied) */
    long line;        /* 0 when the problem is not one line's */
    char why[200];
};

/* Loads the files (a name "-" is standard input) as one history for the model: pairs each
 * invocation with its completion, drops what constrains nothing (above). Returns 0 and fills
 * *out (free it with history_free), or -1 with *err filled: the history is malformed or a
 * file could not be read. */
int history_load(const char *const *files, size_t nfiles, enum hist_model_kind model,
                 struct history *out, struct hist_error *err);

/* Loads one history from a string (the tests' way): the same as history_load with one file
 * named `name`. */
int history_load_string(const char *text, const char *name, enum hist_model_kind model,
                        struct history *out, struct hist_error *err);

/* Frees what history_load allocated; the struct may be loaded again after. */
void history_free(struct history *h);

/* Writes op as one line of a report: process, times, the operation and its answer (an order
 * of 16 items needs about 600 bytes; a shorter buf gets the line cut). */
void hist_op_describe(const struct hist_op *op, char *buf, size_t len);

/* The goods op acts on: an order's items, one for any other operation. */
static inline uint32_t hist_op_width(const struct hist_op *op)
{
    return op->f == HIST_F_ORDER ? op->nitems : 1;
}

/* The slot of op's k-th goods (k < hist_op_width(op)). */
static inline uint32_t hist_op_slot(const struct hist_op *op, uint32_t k)
{
    return op->f == HIST_F_ORDER ? op->items[k].slot : op->slot;
}

#endif
