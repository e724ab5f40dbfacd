/* common.h — the few helpers every module shares: exit codes, checked allocation, sizes.
 *
 * Everything here depends on libc only, so every folder may include it. */
#ifndef TF_COMMON_H
#define TF_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Process exit codes (sysexits.h values), documented in `tpuflow help` and the README. */
enum tf_exit {
	TF_EXIT_OK = 0,           /* success */
	TF_EXIT_FAILED = 1,       /* the run or a step failed */
	TF_EXIT_USAGE = 64,       /* bad command line */
	TF_EXIT_DATAERR = 65,     /* bad input data (pipeline file, dataset, request) */
	TF_EXIT_NOTFOUND = 66,    /* a named run, step, model, version or alias does not exist */
	TF_EXIT_UNAVAILABLE = 69, /* a service (S3, Slurm, daemon) is unavailable */
	TF_EXIT_SOFTWARE = 70,    /* internal error */
	TF_EXIT_TEMPFAIL = 75,    /* busy: another process holds it (a run, the daemon's home) */
	TF_EXIT_CONFIG = 78,      /* bad configuration (e.g. database newer than the program) */
};

#define TF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* TF_ASSERT(cond): an invariant the code around it relies on (a state the transition table
 * allows, a field only the coordinator writes). Checked in debug and sanitizer builds
 * (-DTF_DEBUG: `make asan`, `make debug`): a false condition prints where and aborts.
 * Elsewhere the condition is compiled but never evaluated, so it must have no side effects:
 * keep a call's result in a variable and assert on the variable. */
#ifdef TF_DEBUG
#define TF_ASSERT(cond) ((cond) ? (void)0 : tf_assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define TF_ASSERT(cond) ((void)sizeof(!(cond)))
#endif
_Noreturn void tf_assert_fail(const char *cond, const char *file, int line, const char *func);

/* Allocation that never returns NULL: out of memory aborts with a message, since no caller
 * can do anything useful about it. */
void *tf_xmalloc(size_t n);
void *tf_xcalloc(size_t count, size_t size);
void *tf_xrealloc(void *p, size_t n);
char *tf_xstrdup(const char *s);
/* printf into a new string; the caller owns it. */
char *tf_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Formats a message for people into err[0..errlen) (nothing when err is NULL or errlen 0):
 * the usual way functions here hand back what went wrong with their negative code. */
void tf_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Monotonic and wall clocks in seconds. */
double tf_now_monotonic(void);
double tf_now_wall(void);

/* Writes s to f with every control character (C0, DEL) as \xNN, so text that came from input
 * (a key, a file name, a step's output) cannot move the cursor or recolour the terminal. */
void tf_fputs_escaped(const char *s, FILE *f);

/* Reads a whole file (up to max_bytes) into a new NUL-terminated buffer owned by the caller.
 * Returns 0, or a negative errno (-EFBIG when larger than max_bytes). */
int tf_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len);

/* Creates a directory and its parents (mode 0755); 0 (also when it exists) or negative errno.
 * When the parent exists this is one mkdir call. */
int tf_mkdir_p(const char *path);

/* Whether process pid exists and has not exited. A zombie (exited, not yet reaped by its
 * parent, e.g. just after kill -9) counts as gone: it will never run again. */
int tf_pid_alive(long pid);

/* Whether any process of process group `pgid` is alive (zombies do not count): scans /proc.
 * Returns 1 or 0. */
int tf_pgrp_alive(long pgid);

/* Ends process group `pgid`: SIGTERM to the group, then SIGKILL once `grace` seconds passed,
 * and waits (at most `grace` + 5 s) until no process of it is alive. Returns 0 when the group
 * is gone (or never existed), -ETIMEDOUT when something of it still lives, -EPERM when it
 * may not be signalled. */
int tf_pgrp_end(long pgid, double grace);

/* `n` random bytes from the kernel as 2n lowercase hex digits into out (2n+1 bytes). */
int tf_random_hex(char *out, size_t n);
/* n bytes as 2n lowercase hex digits and a NUL (out holds 2n + 1). */
void tf_hex_encode(const void *data, size_t n, char *out);

/* Number of online CPUs (at least 1). */
int tf_ncpus(void);

#endif
