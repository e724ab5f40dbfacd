/* cron.h — cron schedules: the 5-field text (minute hour day-of-month month day-of-week, with
 * `*`, ranges `a-b`, steps `/n`, lists `a,b`, month and weekday names) and the macros @yearly,
 * @monthly, @weekly, @daily, @hourly, parsed into bit sets; and the next fire time after a
 * given instant in an IANA time zone.
 *
 * Days: when both day-of-month and day-of-week are restricted (neither starts with `*`), a day
 * matches if either does (as Vixie cron); otherwise both must.
 *
 * Daylight-saving time follows Vixie cron: a job whose minute and hour are both fixed (no `*`
 * in either) and whose wall time falls in a spring-forward gap fires once at the first instant
 * after the gap; in a fall-back overlap it fires once, at the first occurrence of its wall
 * time. Jobs with `*` in the minute or hour fire on the wall clock as it happens: nothing in a
 * gap, both passes of an overlap.
 *
 * Time zones are read from the system TZ database (TZDIR, else /usr/share/zoneinfo) through
 * localtime_r/mktime with TZ set for the call; calls into this module are serialised, and the
 * process's own TZ is restored after each.
 */
#ifndef TF_CRON_H
#define TF_CRON_H

#include <stddef.h>
#include <stdint.h>

struct tf_cron {
	uint64_t minute; /* bit m: minute m (0..59) */
	uint32_t hour;   /* bit h (0..23) */
	uint32_t dom;    /* bit d (1..31) */
	uint16_t month;  /* bit m (1..12) */
	uint8_t dow;     /* bit d (0..6, Sunday 0) */
	int dom_any;     /* day-of-month field starts with `*` */
	int dow_any;     /* day-of-week field starts with `*` */
	int fixed;       /* minute and hour fields have no `*`: DST catch-up applies */
};

/* Parses `text`. 0, or -EINVAL with a message in err and *col (may be NULL) the 1-based
 * column in text where the offending part starts. */
int tf_cron_parse(const char *text, struct tf_cron *out, int *col, char *err, size_t errlen);

/* 0 when tz names a zone of the TZ database ("UTC", "Europe/Berlin"), else -EINVAL with err. */
int tf_cron_tz_check(const char *tz, char *err, size_t errlen);

/* The first fire time strictly after `after` (Unix seconds) in zone tz (NULL or "": UTC), into
 * *next. -ERANGE when none within 5 years (a tf_cron made by hand: parsing refuses "0 0 30 2
 * *"), -EINVAL for a bad zone. Safe from any thread; TZ is set meanwhile and restored after,
 * to ":/etc/localtime" when it was unset (the same zone for libc; cron.c says why). */
int tf_cron_next(const struct tf_cron *c, const char *tz, int64_t after, int64_t *next);

#endif
