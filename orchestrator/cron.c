/* cron.c — owns cron schedule text (parse into bit sets, with the column of what is wrong) and
 * next-fire-time computation in a time zone, with the Vixie cron rules for daylight-saving
 * gaps and overlaps (cron.h). */
#include "orchestrator/cron.h"

#include "common/common.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

/* ---- parsing ---- */

struct field {
	const char *name;
	int lo, hi;
	const char *const *names; /* names for lo.. (NULL: numbers only) */
};

static const char *const months[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                     "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const days[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

static const struct field fields[5] = {{"minute", 0, 59, NULL},
                                       {"hour", 0, 23, NULL},
                                       {"day of month", 1, 31, NULL},
                                       {"month", 1, 12, months},
                                       {"day of week", 0, 7, days}};

/* A number or a name at *p (advanced past it); -1 when neither. */
static int value(const struct field *f, const char **p)
{
	const char *s = *p;
	if (isdigit((unsigned char)*s)) {
		long v = 0;
		while (isdigit((unsigned char)*s) && v < 1000)
			v = v * 10 + (*s++ - '0');
		*p = s;
		return (int)v;
	}
	for (int i = 0; f->names && f->names[i]; i++)
		if (!strncasecmp(s, f->names[i], 3) && !isalpha((unsigned char)s[3])) {
			*p = s + 3;
			return f->lo + i;
		}
	return -1;
}

/* A parse error at column `at`: the message into err, the column into *col; -EINVAL. */
#define BAD(at, ...) (snprintf(err, errlen, __VA_ARGS__), (col ? *col = (at) : 0), -EINVAL)

/* One field [start, start+len) into bits; `base` is the column of start. */
static int parse_field(const struct field *f, const char *start, int len, int base, uint64_t *bits,
                       int *any, char *err, size_t errlen, int *col)
{
	*bits = 0;
	*any = start[0] == '*';
	const char *p = start, *end = start + len;
	while (p < end) {
		const char *item = p;
		int ilen = 0;
		while (item + ilen < end && item[ilen] != ',')
			ilen++;
		int at = base + (int)(item - start);
		if (ilen == 0)
			return BAD(at, "%s: empty item in a list", f->name);
		int a, b, step = 1;
		const char *q = item;
		if (*q == '*') {
			a = f->lo;
			b = f->hi == 7 ? 6 : f->hi;
			q++;
		} else {
			a = value(f, &q);
			if (a < 0)
				return BAD(at, "%s: '%.*s' is not a number or a name", f->name,
				           ilen, item);
			b = a;
			if (*q == '-') {
				q++;
				b = value(f, &q);
				if (b < 0)
					return BAD(at, "%s: bad range '%.*s'", f->name, ilen, item);
			} else if (*q == '/') {
				b = f->hi == 7 ? 6 : f->hi; /* a/n: from a to the end */
			}
		}
		if (*q == '/') {
			q++;
			const char *sq = q;
			step = value(&(struct field){f->name, 0, 0, NULL}, &q);
			if (step < 1 || q == sq)
				return BAD(at, "%s: bad step in '%.*s'", f->name, ilen, item);
		}
		if (q != item + ilen)
			return BAD(at + (int)(q - item), "%s: unexpected '%.*s'", f->name,
			           (int)(item + ilen - q), q);
		if (a < f->lo || a > f->hi || b < f->lo || b > f->hi)
			return BAD(at, "%s: '%.*s' is out of range %s", f->name, ilen, item,
			           f->hi == 59   ? "0-59"
			           : f->hi == 23 ? "0-23"
			           : f->hi == 31 ? "1-31"
			           : f->hi == 12 ? "1-12 (or jan-dec)"
			                         : "0-7 (or sun-sat)");
		if (a > b)
			return BAD(at, "%s: range '%.*s' runs backwards", f->name, ilen, item);
		for (int v = a; v <= b; v += step)
			*bits |= 1ull << (f->hi == 7 && v == 7 ? 0 : v);
		p = item + ilen + (item + ilen < end);
		if (item + ilen < end && p == end)
			return BAD(base + len, "%s: the list ends with ','", f->name);
	}
	return 0;
}

int tf_cron_parse(const char *text, struct tf_cron *out, int *col, char *err, size_t errlen)
{
	static const struct {
		const char *name, *expands;
	} macros[] = {{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
	              {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
	              {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
	              {"@hourly", "0 * * * *"}};
	memset(out, 0, sizeof(*out));
	const char *s = text;
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '@') {
		size_t n = strcspn(s, " \t");
		const char *rest = s + n;
		while (*rest == ' ' || *rest == '\t')
			rest++;
		for (size_t i = 0; i < sizeof(macros) / sizeof(macros[0]); i++)
			if (strlen(macros[i].name) == n && !strncasecmp(s, macros[i].name, n)) {
				if (*rest)
					return BAD((int)(rest - text) + 1,
					           "%s takes nothing after it: '%s'",
					           macros[i].name, rest);
				return tf_cron_parse(macros[i].expands, out, NULL, err, errlen);
			}
		return BAD(
		    (int)(s - text) + 1,
		    "unknown macro '%.*s': use @hourly, @daily, @weekly, @monthly or @yearly",
		    (int)n, s);
	}
	uint64_t bits[5];
	int any[5], at[5], len[5], k = 0;
	while (*s) {
		size_t n = strcspn(s, " \t");
		if (k == 5)
			return BAD((int)(s - text) + 1,
			           "more than 5 fields: '%.*s' is one too many", (int)n, s);
		int rc = parse_field(&fields[k], s, (int)n, (int)(s - text) + 1, &bits[k], &any[k],
		                     err, errlen, col);
		if (rc)
			return rc;
		at[k] = (int)(s - text) + 1;
		len[k] = (int)n;
		k++;
		s += n;
		while (*s == ' ' || *s == '\t')
			s++;
	}
	if (k < 5)
		return BAD((int)(s - text) + 1,
		           "%s fields: a schedule has 5 (minute hour day-of-month month "
		           "day-of-week) or is a macro like @daily",
		           k == 0 ? "no" : "too few");
	/* a day of month no month of it has, and no day of week to OR with: it never fires */
	static const int mdays[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int fires = any[2] || !any[4];
	for (int m = 1; m <= 12 && !fires; m++)
		for (int d = 1; d <= mdays[m] && !fires && (bits[3] >> m) & 1; d++)
			fires = (bits[2] >> d) & 1;
	if (!fires)
		return BAD(at[2],
		           "day of month: '%.*s' never falls in month '%.*s': the schedule would "
		           "never fire",
		           len[2], text + at[2] - 1, len[3], text + at[3] - 1);
	out->minute = bits[0];
	out->hour = (uint32_t)bits[1];
	out->dom = (uint32_t)bits[2];
	out->month = (uint16_t)bits[3];
	out->dow = (uint8_t)bits[4];
	out->dom_any = any[2];
	out->dow_any = any[4];
	out->fixed = !any[0] && !any[1];
	return 0;
}

/* ---- time zones ---- */

int tf_cron_tz_check(const char *tz, char *err, size_t errlen)
{
	if (!tz || !*tz || !strcmp(tz, "UTC"))
		return 0;
	const char *dir = getenv("TZDIR");
	if (!dir || !*dir)
		dir = "/usr/share/zoneinfo";
	int ok = tz[0] != '/' && !strstr(tz, "..") && strlen(tz) < 128;
	for (const char *c = tz; ok && *c; c++)
		ok = isalnum((unsigned char)*c) || strchr("/_+-", *c);
	char path[512];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/%s", dir, tz);
	if (!ok || stat(path, &sb) || !S_ISREG(sb.st_mode)) {
		tf_errf(err, errlen,
		        "unknown time zone '%s': use a name of the TZ database such as UTC, "
		        "Europe/Berlin or America/New_York (see %s)",
		        tz, dir);
		return -EINVAL;
	}
	return 0;
}

static pthread_mutex_t tz_mu = PTHREAD_MUTEX_INITIALIZER;

/* The zone goes through TZ, the only way libc's localtime_r and mktime take one. Other
 * threads read the environment meanwhile (getenv of their own variables), so TZ is only ever
 * replaced, never removed: glibc's setenv of a name already there swaps that one slot and
 * keeps the old string, while adding or removing a name moves the array under the readers
 * (a concurrent getenv could miss a variable that is set). A TZ that was unset comes back as
 * ":/etc/localtime", which libc reads exactly as it reads no TZ. */
#define TZ_LOCAL ":/etc/localtime"

/* Sets TZ for the calls that follow (under tz_mu); *saved gets the old value (owned). */
static void tz_enter(const char *tz, char **saved)
{
	pthread_mutex_lock(&tz_mu);
	const char *old = getenv("TZ");
	*saved = old ? strdup(old) : NULL;
	setenv("TZ", tz && *tz ? tz : "UTC", 1);
	tzset();
}

static void tz_leave(char *saved)
{
	setenv("TZ", saved ? saved : TZ_LOCAL, 1);
	tzset();
	free(saved);
	pthread_mutex_unlock(&tz_mu);
}

/* ---- next fire time ---- */

static int day_ok(const struct tf_cron *c, const struct tm *t)
{
	int d = (c->dom >> t->tm_mday) & 1, w = (c->dow >> t->tm_wday) & 1;
	if (!((c->month >> (t->tm_mon + 1)) & 1))
		return 0;
	if (!c->dom_any && !c->dow_any)
		return d || w;
	return d && w;
}

static int wall_ok(const struct tf_cron *c, const struct tm *t)
{
	return day_ok(c, t) && ((c->hour >> t->tm_hour) & 1) && ((c->minute >> t->tm_min) & 1);
}

/* 1 when the wall time of instant m (offset off) was already shown earlier (a fall-back
 * overlap repeats it). */
static int repeated(time_t m, long off)
{
	struct tm b;
	time_t before = m - 3 * 3600;
	localtime_r(&before, &b);
	if (b.tm_gmtoff <= off)
		return 0;
	time_t m2 = m - (b.tm_gmtoff - off);
	struct tm t2;
	localtime_r(&m2, &t2);
	return t2.tm_gmtoff == b.tm_gmtoff;
}

/* 1 when a wall time in (wall(p), wall(m)) that does not exist (a spring-forward gap between
 * p and m) matches c. Wall times are Unix seconds plus the offset. */
static int gap_match(const struct tf_cron *c, time_t p, long offp, time_t m, long offm)
{
	for (time_t w = p + offp + 60; w < m + offm; w += 60) {
		struct tm a, b;
		time_t u1 = w - offp, u2 = w - offm;
		localtime_r(&u1, &a);
		localtime_r(&u2, &b);
		if (a.tm_gmtoff == offp || b.tm_gmtoff == offm)
			continue; /* this wall time exists */
		struct tm t;
		time_t wt = w;
		gmtime_r(&wt, &t); /* the wall fields of w */
		if (wall_ok(c, &t))
			return 1;
	}
	return 0;
}

int tf_cron_next(const struct tf_cron *c, const char *tz, int64_t after, int64_t *next)
{
	char err[256], *saved;
	if (tf_cron_tz_check(tz, err, sizeof(err)))
		return -EINVAL;
	tz_enter(tz, &saved);
	time_t m = (time_t)((after / 60 + 1) * 60), p = m - 60,
	       limit = (time_t)after + 5 * 366 * 86400;
	struct tm prev, t;
	localtime_r(&p, &prev);
	int rc = -ERANGE;
	while (m <= limit) {
		localtime_r(&m, &t);
		if (c->fixed && t.tm_gmtoff > prev.tm_gmtoff &&
		    gap_match(c, p, prev.tm_gmtoff, m, t.tm_gmtoff)) {
			rc = 0;
			break;
		}
		time_t n = m + 60;
		if (!day_ok(c, &t) || !((c->hour >> t.tm_hour) & 1)) {
			/* skip the rest of the day, or of the hour */
			struct tm j = t;
			if (!day_ok(c, &t)) {
				j.tm_mday++;
				j.tm_hour = 0;
			} else {
				j.tm_hour++;
			}
			j.tm_min = j.tm_sec = 0;
			j.tm_isdst = -1;
			time_t jn = mktime(&j);
			if (jn > n)
				n = jn;
		} else if ((c->minute >> t.tm_min) & 1 && !(c->fixed && repeated(m, t.tm_gmtoff))) {
			rc = 0;
			break;
		}
		p = m;
		prev = t;
		m = n;
	}
	tz_leave(saved);
	if (rc == 0)
		*next = (int64_t)m;
	return rc;
}
