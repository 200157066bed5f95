/*
 * base.c - the names of base.h's enums, one table each, and the one mapping of a guard's
 * failure to an outcome.
 */
#include "service/sale/base.h"

static const char *const point_names[] = {
    [DEDUCT_AT_ENTERED] = "entered", [DEDUCT_AT_BEGUN] = "begun",
    [DEDUCT_AT_READ] = "read",       [DEDUCT_AT_WRITTEN] = "written",
    [DEDUCT_AT_CHECKED] = "checked", [DEDUCT_AT_COMMITTED] = "committed",
};

static const char *const stage_names[DEDUCT_STAGES_] = {
    [DEDUCT_STAGE_ACQUIRE] = "acquire", [DEDUCT_STAGE_CLAIM] = "claim",
    [DEDUCT_STAGE_COMMIT] = "commit",   [DEDUCT_STAGE_RELEASE] = "release",
    [DEDUCT_STAGE_REST] = "rest",
};

static const char *const outcome_names[DEDUCT_OUTCOMES_] = {
    [DEDUCT_NO_OUTCOME] = "",
    [DEDUCT_DEDUCTED] = "deducted",
    [DEDUCT_INSUFFICIENT_STOCK] = "insufficient_stock",
    [DEDUCT_UNKNOWN_GOODS] = "unknown_goods",
    [DEDUCT_LOCK_TIMEOUT] = "lock_timeout",
    [DEDUCT_LOCK_LOST] = "lock_lost",
    [DEDUCT_UNAVAILABLE] = "unavailable",
    [DEDUCT_REPLAYED] = "replayed",
    [DEDUCT_COMMIT_UNKNOWN] = "commit_unknown",
    [DEDUCT_CONFLICT] = "conflict",
};

const char *deduct_point_name(deduct_point point)
{
    if ((unsigned)point < sizeof(point_names) / sizeof(point_names[0]))
        return point_names[point];
    return "?";
}

const char *deduct_stage_name(deduct_stage stage)
{
    return (unsigned)stage < DEDUCT_STAGES_ ? stage_names[stage] : "?";
}

const char *deduct_outcome_name(deduct_outcome outcome)
{
    return (unsigned)outcome < DEDUCT_OUTCOMES_ ? outcome_names[outcome] : "?";
}

deduct_outcome guard_outcome(int rc)
{
    return rc == GUARD_ERR_TIMEOUT ? DEDUCT_LOCK_TIMEOUT : DEDUCT_UNAVAILABLE;
}
