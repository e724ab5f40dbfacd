/* common.c — checked allocation, clocks, whole-file reads and mkdir -p for every module. */
#include "common/common.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
	fprintf(stderr, "tpuflow: out of memory allocating %zu bytes\n", n);
	abort();
}

void *tf_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *tf_xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);
	if (!p)
		oom(count * size);
	return p;
}

void *tf_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *tf_xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");
	if (!p)
		oom(s ? strlen(s) : 0);
	return p;
}

char *tf_xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		oom(0);
	return s;
}

void tf_errf(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static double clock_seconds(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double tf_now_monotonic(void)
{
	return clock_seconds(CLOCK_MONOTONIC);
}

double tf_now_wall(void)
{
	return clock_seconds(CLOCK_REALTIME);
}

void tf_fputs_escaped(const char *s, FILE *f)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
}

int tf_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len)
{
	int rc = 0;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	for (;;) {
		if (len == cap) {
			if (cap > max_bytes) {
				rc = -EFBIG;
				goto out;
			}
			cap = cap ? cap * 2 : 65536;
			buf = tf_xrealloc(buf, cap + 1);
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (len > max_bytes) {
			rc = -EFBIG;
			goto out;
		}
		if (n == 0) {
			if (ferror(f))
				rc = -EIO;
			break;
		}
	}
out:
	fclose(f);
	if (rc) {
		free(buf);
		return rc;
	}
	if (!buf)
		buf = tf_xmalloc(1);
	buf[len] = '\0';
	*out = buf;
	if (out_len)
		*out_len = len;
	return 0;
}

/* mkdir -p on a writable copy of the path: the directory itself first, its parents only when
 * one is missing (ENOENT), so an existing parent costs no system call. */
static int mkdir_parents(char *p)
{
	if (mkdir(p, 0755) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -errno;
	char *slash = strrchr(p, '/');
	while (slash && slash > p && slash[-1] == '/')
		slash--; /* "a//b": the parent is "a" */
	if (!slash || slash == p)
		return -ENOENT;
	*slash = '\0';
	int rc = mkdir_parents(p);
	*slash = '/';
	if (rc)
		return rc;
	return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -errno;
}

int tf_mkdir_p(const char *path)
{
	char *p = tf_xstrdup(path);
	int rc = mkdir_parents(p);
	free(p);
	return rc;
}

int tf_pid_alive(long pid)
{
	if (pid <= 0 || (kill((pid_t)pid, 0) < 0 && errno == ESRCH))
		return 0;
	/* /proc/PID/stat: "PID (COMM) STATE ..."; COMM may hold spaces and parentheses, so the
	 * state is the first field after the last ')'. */
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 1; /* no /proc: kill() said it exists */
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rp = strrchr(buf, ')');
	return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

/* The process group and state of /proc/PID/stat (fields 5 and 3); -1 when unreadable. */
static long proc_pgrp(const char *pid, char *state)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *rp = strrchr(buf, ')');
	long ppid, pgrp;
	if (!rp || sscanf(rp + 1, " %c %ld %ld", state, &ppid, &pgrp) != 3)
		return -1;
	return pgrp;
}

int tf_pgrp_alive(long pgid)
{
	if (pgid <= 1 || (kill((pid_t)-pgid, 0) < 0 && errno == ESRCH))
		return 0;
	DIR *d = opendir("/proc");
	if (!d)
		return 1; /* no /proc: kill() said the group exists */
	int alive = 0;
	struct dirent *de;
	while (!alive && (de = readdir(d))) {
		char state = 0;
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		if (proc_pgrp(de->d_name, &state) == pgid && state != 'Z' && state != 'X')
			alive = 1;
	}
	closedir(d);
	return alive;
}

int tf_pgrp_end(long pgid, double grace)
{
	if (!tf_pgrp_alive(pgid))
		return 0;
	if (kill((pid_t)-pgid, SIGTERM) < 0 && errno == EPERM)
		return -EPERM;
	double t0 = tf_now_monotonic();
	int killed = 0;
	while (tf_pgrp_alive(pgid)) {
		double dt = tf_now_monotonic() - t0;
		if (!killed && dt >= grace) {
			kill((pid_t)-pgid, SIGKILL);
			killed = 1;
		}
		if (dt >= grace + 5)
			return -ETIMEDOUT;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

int tf_random_hex(char *out, size_t n)
{
	unsigned char b[64];
	if (n > sizeof(b))
		return -EINVAL;
	if (getrandom(b, n, 0) != (ssize_t)n)
		return -EIO;
	tf_hex_encode(b, n, out);
	return 0;
}

void tf_hex_encode(const void *data, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = data;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int tf_ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

_Noreturn void tf_assert_fail(const char *cond, const char *file, int line, const char *func)
{
	fprintf(stderr, "tpuflow: %s:%d: %s: invariant broken: %s\n", file, line, func, cond);
	fflush(stderr);
	abort();
}
