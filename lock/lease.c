/*
 * lease.c - the renewal schedule (see lease.h).
 */
#include "lock/lease.h"
#include "lock/clock.h"

int64_t lock__lease_period_ns(int64_t lease_ms)
{
    int64_t period = lock__ms_to_ns(lease_ms) / 3;

    return period >= LOCK__NS_PER_MS ? period : LOCK__NS_PER_MS;
}

int64_t lock__lease_renewal_due(int64_t sent_ns, int64_t lease_ms)
{
    return lock__add_ns(sent_ns, lock__lease_period_ns(lease_ms));
}

int64_t lock__lease_retry_due(int64_t now_ns, int64_t lease_ms)
{
    return lock__add_ns(now_ns, lock__lease_period_ns(lease_ms) / 3);
}

bool lock__lease_capped(int64_t since_ns, int64_t now_ns, int64_t max_hold_ms)
{
    return now_ns - since_ns >= lock__ms_to_ns(max_hold_ms);
}
