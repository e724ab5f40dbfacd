/* log.c — the logging module: writes tagged lines (or JSON lines) to stderr. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum tf_log_level tf_log_threshold = TF_LOG_WARN;
static int log_json;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[TF_LOG_LAST] = {"debug", "info", "warn", "error"};

void tf_log_init(void)
{
	const char *lv = getenv("TPUFLOW_LOG");
	for (int i = 0; lv && i < TF_LOG_LAST; i++)
		if (!strcmp(lv, level_names[i]))
			tf_log_threshold = (enum tf_log_level)i;
	const char *fmt = getenv("TPUFLOW_LOG_FORMAT");
	log_json = fmt && !strcmp(fmt, "json");
}

static void json_escape(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
}

void tf_log_write(enum tf_log_level level, const char *tag, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);

	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char when[32];
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);

	pthread_mutex_lock(&log_lock);
	if (log_json) {
		fprintf(stderr,
		        "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"module\":\"%s\",\"msg\":\"", when,
		        ts.tv_nsec / 1000000, level_names[level], tag);
		json_escape(stderr, msg);
		fputs("\"}\n", stderr);
	} else {
		fprintf(stderr, "%s.%03ldZ %-5s %s: %s\n", when, ts.tv_nsec / 1000000,
		        level_names[level], tag, msg);
	}
	pthread_mutex_unlock(&log_lock);
}
