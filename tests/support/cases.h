/*
 * cases.h - the run of a program's cmocka cases, as every program with a support library of
 * its folder starts it (tests/lock/, tests/db/, tests/deduct/): `PROGRAM --list` prints the
 * cases, `PROGRAM PATTERN` runs those a cmocka pattern matches, `PROGRAM` runs them all.
 */
#ifndef TESTS_SUPPORT_CASES_H
#define TESTS_SUPPORT_CASES_H

#include <setjmp.h> /* cmocka.h needs these four first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>

/* Whether the command line asks for the list of cases (argv[1] is --list); if it does, the
 * names of tests[0..n) are printed, one a line, and the program has nothing more to do. */
bool support_list_cases(const struct CMUnitTest *tests, size_t n, int argc, char **argv);

/* Runs tests[0..n) as the group `name`, with its setup and teardown (either may be NULL);
 * with argv[1], only the cases whose names match that pattern. Returns the exit status: 0
 * when every case that ran passed, 1 otherwise (cmocka prints the counts). */
int support_run_cases(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                      char **argv, CMFixtureFunction setup, CMFixtureFunction teardown);

#endif
