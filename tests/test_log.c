/*
 * test_log.c - the log line format, the level filter, and log_quote().
 *
 * The lines are captured by pointing stderr (fd 2) at a temporary file for the length of
 * one call, then reading the file back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/log.h"

/* Starts capturing fd 2; returns the temporary file to read back with capture_end(). */
static FILE *capture_begin(int *saved_fd)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    *saved_fd = dup(STDERR_FILENO);
    assert_true(*saved_fd >= 0);
    assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
    return f;
}

/* Restores fd 2 and returns what was written (caller frees). */
static char *capture_end(FILE *f, int saved_fd)
{
    off_t len;
    char *text;

    assert_true(dup2(saved_fd, STDERR_FILENO) >= 0);
    close(saved_fd);
    len = lseek(fileno(f), 0, SEEK_END); /* log_write wrote with write(2): no stdio buffer */
    assert_true(len >= 0);
    text = calloc(1, (size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(pread(fileno(f), text, (size_t)len, 0), len);
    fclose(f);
    return text;
}

static void test_level_names(void **state)
{
    (void)state;
    assert_int_equal(log_level_parse("debug"), LOG_DEBUG);
    assert_int_equal(log_level_parse("info"), LOG_INFO);
    assert_int_equal(log_level_parse("warn"), LOG_WARN);
    assert_int_equal(log_level_parse("error"), LOG_ERROR);
    assert_int_equal(log_level_parse("ERROR"), LOG_ERROR);
    assert_int_equal(log_level_parse("warning"), -1);
    assert_int_equal(log_level_parse(""), -1);
    assert_int_equal(log_level_parse(NULL), -1);
    assert_string_equal(log_level_name(LOG_WARN), "warn");
    assert_string_equal(log_level_name(7), "unknown");
}

static void test_line_format(void **state)
{
    int saved;
    FILE *f;
    char *text;
    regex_t re;

    (void)state;
    f = capture_begin(&saved);
    errno = ENOENT;
    log_write(LOG_WARN, "listening", "port=%d instance=%s", 8081, "svc-1");
    assert_int_equal(errno, ENOENT); /* preserved */
    text = capture_end(f, saved);

    assert_int_equal(
        regcomp(&re,
                "^ts=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                "level=warn event=listening port=8081 instance=svc-1\n$",
                REG_EXTENDED),
        0);
    if (regexec(&re, text, 0, NULL, 0) != 0)
        fail_msg("line not as expected: '%s'", text);
    regfree(&re);
    free(text);
}

static void test_newlines_in_pairs_stay_on_one_line(void **state)
{
    int saved;
    FILE *f;
    char *text;

    (void)state;
    f = capture_begin(&saved);
    log_write(LOG_ERROR, "oops", "detail=%s", "two\nlines\r");
    text = capture_end(f, saved);
    assert_non_null(strstr(text, " level=error event=oops detail=two lines \n"));
    assert_int_equal(strchr(text, '\n') - text, (long)strlen(text) - 1);
    free(text);
}

static void test_long_line_is_cut(void **state)
{
    char *big = malloc(10000);
    int saved;
    FILE *f;
    char *text;

    (void)state;
    assert_non_null(big);
    memset(big, 'v', 9999);
    big[9999] = '\0';
    f = capture_begin(&saved);
    log_write(LOG_INFO, "big", "value=%s", big);
    text = capture_end(f, saved);
    assert_int_equal(strlen(text), 4096);
    assert_string_equal(text + 4096 - 4, "...\n");
    free(text);
    free(big);
}

static int evaluated;

static int side_effect(void)
{
    evaluated++;
    return 1;
}

static void test_disabled_level_skips_arguments(void **state)
{
    int saved, before = log_min_level;
    FILE *f;
    char *text;

    (void)state;
    log_min_level = LOG_INFO;
    evaluated = 0;
    f = capture_begin(&saved);
    log_event(LOG_DEBUG, "hidden", "n=%d", side_effect());
    log_event(LOG_INFO, "shown", "n=%d", side_effect());
    text = capture_end(f, saved);
    log_min_level = before;
    assert_int_equal(evaluated, 1);
    assert_null(strstr(text, "hidden"));
    assert_non_null(strstr(text, "event=shown n=1\n"));
    free(text);
}

static void test_quote(void **state)
{
    char buf[64];

    (void)state;
    assert_string_equal(log_quote(buf, sizeof(buf), "svc-1"), "svc-1");
    assert_string_equal(log_quote(buf, sizeof(buf), "/api/deduct?mode=redis"),
                        "\"/api/deduct?mode=redis\""); /* '=' would split the pair */
    assert_string_equal(log_quote(buf, sizeof(buf), ""), "\"\"");
    assert_string_equal(log_quote(buf, sizeof(buf), NULL), "\"\"");
    assert_string_equal(log_quote(buf, sizeof(buf), "connection refused"),
                        "\"connection refused\"");
    assert_string_equal(log_quote(buf, sizeof(buf), "say \"hi\"\\"), "\"say \\\"hi\\\"\\\\\"");
    assert_string_equal(log_quote(buf, sizeof(buf), "a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
    assert_string_equal(log_quote(buf, sizeof(buf), "\x01\x7f\xc3\xa9"),
                        "\"\\x01\\x7f\\xc3\\xa9\"");
    assert_ptr_equal(log_quote(buf, sizeof(buf), "x"), buf);
}

static void test_quote_truncates(void **state)
{
    char buf[16], big[100];

    (void)state;
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    /* Too long, even if safe: quoted, cut, and marked. */
    assert_string_equal(log_quote(buf, sizeof(buf), big), "\"aaaaaaaaaa...\"");
    assert_int_equal(strlen(buf), sizeof(buf) - 1);
    /* Exactly fitting, unquoted. */
    big[15] = '\0';
    assert_string_equal(log_quote(buf, sizeof(buf), big), "aaaaaaaaaaaaaaa");
    /* An escape is never split. */
    assert_string_equal(log_quote(buf, sizeof(buf), "\n\n\n\n\n\n\n\n"), "\"\\n\\n\\n\\n\\n...\"");
    /* Every size works, down to nothing. */
    for (unsigned long n = 1; n < sizeof(buf); n++) {
        log_quote(buf, n, "some value \"with\" quotes\n");
        assert_true(strlen(buf) < n);
    }
    assert_string_equal(log_quote(buf, 0, "x"), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_names),
        cmocka_unit_test(test_line_format),
        cmocka_unit_test(test_newlines_in_pairs_stay_on_one_line),
        cmocka_unit_test(test_long_line_is_cut),
        cmocka_unit_test(test_disabled_level_skips_arguments),
        cmocka_unit_test(test_quote),
        cmocka_unit_test(test_quote_truncates),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
