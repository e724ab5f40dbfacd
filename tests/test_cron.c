/* test_cron.c — cron schedules as tables: what parses (fields, ranges, steps, lists, names,
 * macros) and what is refused with the column of the offending part; next fire times in UTC
 * and in zones with daylight-saving time (a spring-forward gap and a fall-back overlap, Vixie
 * cron rules), across month and year ends, and day-of-month OR day-of-week. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "orchestrator/cron.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Unix seconds of a UTC wall time "YYYY-MM-DD HH:MM". */
static int64_t utc(const char *s)
{
	struct tm t = {0};
	assert_int_equal(
	    sscanf(s, "%d-%d-%d %d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min),
	    5);
	t.tm_year -= 1900;
	t.tm_mon -= 1;
	return (int64_t)timegm(&t);
}

static void fmt_utc(int64_t v, char *buf, size_t len)
{
	time_t t = (time_t)v;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M", &tm);
}

static void test_cron_parse_table(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint64_t minute;
		uint32_t hour, dom;
		uint16_t month;
		uint8_t dow;
	} ok[] = {
	    {"* * * * *", (1ull << 60) - 1, (1u << 24) - 1, 0xfffffffe, 0x1ffe, 0x7f},
	    {"0 0 1 1 *", 1, 1, 1u << 1, 1u << 1, 0x7f},
	    {"*/15 9-17 * * mon-fri", 1 | 1ull << 15 | 1ull << 30 | 1ull << 45, 0x3fe00, 0xfffffffe,
	     0x1ffe, 0x3e},
	    {"5,10-12 0 */10 jan,JUL sun", 1ull << 5 | 7ull << 10, 1,
	     1u << 1 | 1u << 11 | 1u << 21 | 1u << 31, 1u << 1 | 1u << 7, 1},
	    {"0 12 * * 7", 1, 1u << 12, 0xfffffffe, 0x1ffe, 1},
	    {"30/10 1/6 * 2-12/5 *", 1ull << 30 | 1ull << 40 | 1ull << 50,
	     1u << 1 | 1u << 7 | 1u << 13 | 1u << 19, 0xfffffffe, 1u << 2 | 1u << 7 | 1u << 12,
	     0x7f},
	    {"@hourly", 1, (1u << 24) - 1, 0xfffffffe, 0x1ffe, 0x7f},
	    {"@daily", 1, 1, 0xfffffffe, 0x1ffe, 0x7f},
	    {"@weekly", 1, 1, 0xfffffffe, 0x1ffe, 1},
	    {"@monthly", 1, 1, 1u << 1, 0x1ffe, 0x7f},
	    {"  @YEARLY ", 1, 1, 1u << 1, 1u << 1, 0x7f},
	    {"@annually", 1, 1, 1u << 1, 1u << 1, 0x7f},
	    {"@midnight", 1, 1, 0xfffffffe, 0x1ffe, 0x7f},
	    /* the 29th of February fires in leap years; the 30th does when OR'ed with a weekday */
	    {"0 0 29 2 *", 1, 1, 1u << 29, 1u << 2, 0x7f},
	    {"0 0 30 2 mon", 1, 1, 1u << 30, 1u << 2, 1u << 1},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct tf_cron c;
		char err[256] = "";
		int col = 0;
		int rc = tf_cron_parse(ok[i].text, &c, &col, err, sizeof(err));
		if (rc)
			fail_msg("'%s': %s (col %d)", ok[i].text, err, col);
		assert_true(c.minute == ok[i].minute);
		assert_int_equal(c.hour, ok[i].hour);
		assert_int_equal(c.dom, ok[i].dom);
		assert_int_equal(c.month, ok[i].month);
		assert_int_equal(c.dow, ok[i].dow);
	}
	static const struct {
		const char *text;
		int col;
		const char *msg;
	} bad[] = {
	    {"", 1, "no fields"},
	    {"* * * *", 8, "too few fields"},
	    {"* * * * * *", 11, "more than 5 fields"},
	    {"60 * * * *", 1, "minute: '60' is out of range 0-59"},
	    {"0 24 * * *", 3, "hour: '24' is out of range 0-23"},
	    {"0 0 0 * *", 5, "day of month: '0' is out of range 1-31"},
	    {"0 0 * 13 *", 7, "month: '13' is out of range 1-12"},
	    {"0 0 * * 8", 9, "day of week: '8' is out of range 0-7"},
	    {"0 0 * foo *", 7, "month: 'foo' is not a number or a name"},
	    {"*/0 * * * *", 1, "minute: bad step"},
	    {"0 5-2 * * *", 3, "range '5-2' runs backwards"},
	    {"0 1,,2 * * *", 5, "hour: empty item"},
	    {"1x * * * *", 2, "minute: unexpected 'x'"},
	    {"0 0 * * mon-", 9, "day of week: bad range 'mon-'"},
	    {"@fortnightly", 1, "unknown macro '@fortnightly'"},
	    {"@daily 5", 8, "@daily takes nothing after it"},
	    {"@reboot", 1, "unknown macro '@reboot'"},
	    /* a day no month of the schedule has, and no day of week to OR with */
	    {"0 0 30 2 *", 5,
	     "day of month: '30' never falls in month '2': the schedule would "
	     "never fire"},
	    {"0 0 31 apr,jun,sep,nov *", 5, "never falls in month 'apr,jun,sep,nov'"},
	    {"0 0 30-31 2 */2", 5, "never falls in month '2'"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tf_cron c;
		char err[256] = "";
		int col = -1;
		assert_int_equal(tf_cron_parse(bad[i].text, &c, &col, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].msg) || col != bad[i].col)
			fail_msg("'%s': got col %d '%s', wanted col %d '%s'", bad[i].text, col, err,
			         bad[i].col, bad[i].msg);
	}
}

static void test_cron_next_table(void **state)
{
	(void)state;
	static const struct {
		const char *text, *tz, *after, *next;
	} cases[] = {
	    /* UTC basics, month and year ends, leap day */
	    {"* * * * *", "UTC", "2026-03-01 10:00", "2026-03-01 10:01"},
	    {"*/15 * * * *", "UTC", "2026-03-01 10:07", "2026-03-01 10:15"},
	    {"0 0 1 * *", "UTC", "2026-12-15 00:00", "2027-01-01 00:00"},
	    {"0 0 29 2 *", "UTC", "2026-03-01 00:00", "2028-02-29 00:00"},
	    {"30 23 31 * *", "UTC", "2026-04-01 00:00", "2026-05-31 23:30"},
	    {"@weekly", "UTC", "2026-12-01 12:00", "2026-12-06 00:00"},
	    {"0 9 * * mon-fri", "UTC", "2026-12-04 09:00", "2026-12-07 09:00"},
	    /* both days restricted: the 13th OR a Friday */
	    {"0 0 13 * fri", "UTC", "2026-11-01 00:00", "2026-11-06 00:00"},
	    {"0 0 13 * fri", "UTC", "2026-11-10 00:00", "2026-11-13 00:00"},
	    /* the classic trap: not "the first Monday" but days 1-7 OR every Monday */
	    {"0 0 1-7 * mon", "UTC", "2026-11-03 00:00", "2026-11-04 00:00"},
	    /* a field that starts with '*' is not restricted, even with a step (Vixie cron's
	     * code): odd days AND Mondays, so not Nov 2 (even) nor Nov 3 (Tuesday) */
	    {"0 0 */2 * mon", "UTC", "2026-11-01 00:00", "2026-11-09 00:00"},
	    {"0 0 * * mon", "UTC", "2026-11-01 00:00", "2026-11-02 00:00"},
	    /* a zone without DST: Asia/Tokyo is UTC+9 */
	    {"0 9 * * *", "Asia/Tokyo", "2026-06-01 00:00", "2026-06-02 00:00"},
	    /* New York, spring forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00 UTC) */
	    {"30 2 * * *", "America/New_York", "2026-03-07 12:00", "2026-03-08 07:00"},
	    {"30 2 * * *", "America/New_York", "2026-03-08 07:00", "2026-03-09 06:30"},
	    {"0 1 * * *", "America/New_York", "2026-03-07 12:00", "2026-03-08 06:00"},
	    {"0 3 * * *", "America/New_York", "2026-03-07 12:00", "2026-03-08 07:00"},
	    {"30 * * * *", "America/New_York", "2026-03-08 06:45", "2026-03-08 07:30"},
	    /* New York, fall back 2026-11-01 02:00 EDT -> 01:00 EST (06:00 UTC): 01:30 twice */
	    {"30 1 * * *", "America/New_York", "2026-10-31 12:00", "2026-11-01 05:30"},
	    {"30 1 * * *", "America/New_York", "2026-11-01 05:30", "2026-11-02 06:30"},
	    {"30 * * * *", "America/New_York", "2026-11-01 05:30", "2026-11-01 06:30"},
	    /* Berlin, spring forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC) */
	    {"15 2 * * *", "Europe/Berlin", "2026-03-28 12:00", "2026-03-29 01:00"},
	    {"0 0 * * *", "Europe/Berlin", "2026-03-28 12:00", "2026-03-28 23:00"},
	    /* Berlin, fall back 2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC): 02:30 once */
	    {"30 2 * * *", "Europe/Berlin", "2026-10-24 12:00", "2026-10-25 00:30"},
	    {"30 2 * * *", "Europe/Berlin", "2026-10-25 00:30", "2026-10-26 01:30"},
	    {"*/30 2 * * *", "Europe/Berlin", "2026-10-25 00:30", "2026-10-25 01:00"},
	    /* Lord Howe Island shifts by 30 minutes: spring forward 2026-10-04 02:00 -> 02:30
	     * (+10:30 -> +11, 15:30 UTC), fall back 2026-04-05 02:00 -> 01:30 (+11 -> +10:30,
	     * 15:00 UTC) */
	    {"15 2 * * *", "Australia/Lord_Howe", "2026-10-03 12:00", "2026-10-03 15:30"},
	    {"45 1 * * *", "Australia/Lord_Howe", "2026-04-04 12:00", "2026-04-04 14:45"},
	    {"45 1 * * *", "Australia/Lord_Howe", "2026-04-04 14:45", "2026-04-05 15:15"},
	    {"45 * * * *", "Australia/Lord_Howe", "2026-04-04 14:45", "2026-04-04 15:15"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_cron c;
		char err[256], got[32];
		int64_t next = 0;
		assert_int_equal(tf_cron_parse(cases[i].text, &c, NULL, err, sizeof(err)), 0);
		assert_int_equal(tf_cron_next(&c, cases[i].tz, utc(cases[i].after), &next), 0);
		fmt_utc(next, got, sizeof(got));
		if (next != utc(cases[i].next))
			fail_msg("'%s' in %s after %s UTC: got %s, wanted %s", cases[i].text,
			         cases[i].tz, cases[i].after, got, cases[i].next);
	}
	/* never: the 30th of February (which parsing refuses, so made by hand) */
	struct tf_cron c = {.minute = 1,
	                    .hour = 1,
	                    .dom = 1u << 30,
	                    .month = 1u << 2,
	                    .dow = 0x7f,
	                    .dow_any = 1,
	                    .fixed = 1};
	int64_t next = 0;
	assert_int_equal(tf_cron_next(&c, "UTC", utc("2026-01-01 00:00"), &next), -ERANGE);
	/* the process's own TZ is left as it was */
	setenv("TZ", "Asia/Tokyo", 1);
	assert_int_equal(tf_cron_next(&c, "Europe/Berlin", 0, &next), -ERANGE);
	assert_string_equal(getenv("TZ"), "Asia/Tokyo");
	/* other threads read the environment meanwhile: TZ is replaced, never removed, so the
	 * array of variables keeps its size and order (an unset TZ comes back as the local
	 * zone's file, which libc reads as no TZ) */
	unsetenv("TZ");
	assert_int_equal(tf_cron_next(&c, "Europe/Berlin", 0, &next), -ERANGE);
	assert_string_equal(getenv("TZ"), ":/etc/localtime");
	extern char **environ;
	size_t count = 0;
	while (environ[count])
		count++;
	char **before = calloc(count + 1, sizeof(char *));
	memcpy(before, environ, count * sizeof(char *));
	struct tf_cron d;
	char err[256];
	assert_int_equal(tf_cron_parse("30 2 * * *", &d, NULL, err, sizeof(err)), 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(tf_cron_next(&d, i % 2 ? "America/New_York" : "UTC",
		                              utc("2026-03-07 12:00"), &next),
		                 0);
	for (size_t i = 0; i <= count; i++)
		if (environ[i] != before[i] && (!environ[i] || strncmp(environ[i], "TZ=", 3)))
			fail_msg("environment slot %zu moved: '%s'", i,
			         environ[i] ? environ[i] : "(end)");
	assert_string_equal(getenv("TZ"), ":/etc/localtime");
	free(before);
	unsetenv("TZ");
}

static void test_cron_time_zones_checked(void **state)
{
	(void)state;
	char err[256] = "";
	assert_int_equal(tf_cron_tz_check("UTC", err, sizeof(err)), 0);
	assert_int_equal(tf_cron_tz_check("Europe/Berlin", err, sizeof(err)), 0);
	assert_int_equal(tf_cron_tz_check("Mars/Olympus", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unknown time zone 'Mars/Olympus'"));
	assert_int_equal(tf_cron_tz_check("../../etc/passwd", err, sizeof(err)), -EINVAL);
	assert_int_equal(tf_cron_tz_check("/etc/localtime", err, sizeof(err)), -EINVAL);
	struct tf_cron c;
	int64_t next;
	assert_int_equal(tf_cron_parse("@daily", &c, NULL, err, sizeof(err)), 0);
	assert_int_equal(tf_cron_next(&c, "Nowhere/Else", 0, &next), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cron_parse_table),
	    cmocka_unit_test(test_cron_next_table),
	    cmocka_unit_test(test_cron_time_zones_checked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
