/*
 * cases.c - the run of a program's cmocka cases. See cases.h.
 */
#include "tests/support/cases.h"

#include <stdio.h>
#include <string.h>

bool support_list_cases(const struct CMUnitTest *tests, size_t n, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--list") != 0)
        return false;
    for (size_t i = 0; i < n; i++)
        printf("%s\n", tests[i].name);
    return true;
}

int support_run_cases(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                      char **argv, CMFixtureFunction setup, CMFixtureFunction teardown)
{
    if (argc == 2) /* a pattern: run only the cases whose names match it */
        cmocka_set_test_filter(argv[1]);
    return _cmocka_run_group_tests(name, tests, n, setup, teardown) == 0 ? 0 : 1;
}
