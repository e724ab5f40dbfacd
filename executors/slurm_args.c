/* slurm_args.c — owns the check of the further sbatch options a pipeline gives a step
 * (`slurm.args`, docs/slurm.md): the options the Slurm executor sets itself or that would stop
 * it from following the job are refused, and the values of the resource options whose
 * syntax is known (--time, --mem, --gres) are read as sbatch reads them, so a mistake is
 * reported where it is written rather than by sbatch when the step starts. */
#include "executors/executor.h"

#include "common/common.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Options that break how an attempt is run and followed: one job, submitted at once, found
 * by its name, its environment given by name, its logs through the object store. */
static const struct {
	const char *name;
	char letter; /* its short form, 0: none */
	const char *why;
} owned[] = {
    {"array", 'a', "an attempt is one job, not a job array"},
    {"wait", 'W', "tpuflow follows the job itself, so sbatch must return at once"},
    {"hold", 'H', "a held job never starts"},
    {"job-name", 'J', "tpuflow names the job tpuflow-RUN-STEP-ATTEMPT and finds it by that name"},
    {"output", 'o', "the job's logs go through the object store (tpuflow runs logs)"},
    {"error", 'e', "the job's logs go through the object store (tpuflow runs logs)"},
    {"export", 0,
     "the job gets a fixed list of variables by name (docs/slurm.md); give a shell "
     "step's own in with.env"},
    {"export-file", 0, "the job gets a fixed list of variables by name (docs/slurm.md)"},
    {"wrap", 0, "the job runs the script tpuflow writes"},
    {"test-only", 0, "it submits nothing"},
    {"clusters", 'M', "tpuflow follows jobs on the default cluster only"},
};

static int digits(const char **p)
{
	const char *s = *p;
	while (isdigit((unsigned char)**p))
		(*p)++;
	return *p > s;
}

/* Slurm's time: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS,
 * DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS, or INFINITE/UNLIMITED. */
static int time_ok(const char *v)
{
	if (!strcasecmp(v, "INFINITE") || !strcasecmp(v, "UNLIMITED"))
		return 1;
	const char *p = v;
	if (!digits(&p))
		return 0;
	if (*p == '-' && (p++, !digits(&p)))
		return 0;
	for (int i = 0; *p == ':' && i < 2; i++)
		if (p++, !digits(&p))
			return 0;
	return !*p;
}

/* A memory size: a whole number with an optional K, M, G or T suffix (and B after it). */
static int mem_ok(const char *v)
{
	size_t n = strspn(v, "0123456789");
	if (!n)
		return 0;
	v += n;
	if (*v && strchr("KMGTkmgt", *v))
		v++;
	if (*v == 'B' || *v == 'b')
		v++;
	return !*v;
}

/* GRES: NAME[:TYPE][:COUNT], comma-separated; names and types of letters, digits, '_', '-'
 * and '.'. */
static int gres_ok(const char *v)
{
	size_t parts = 0, len = 0;
	for (const char *p = v;; p++) {
		if (!*p || *p == ',' || *p == ':') {
			if (!len || ++parts > 3)
				return 0;
			len = 0;
			if (*p != ':')
				parts = 0;
			if (!*p)
				return 1;
			continue;
		}
		if (!isalnum((unsigned char)*p) && !strchr("_-.", *p))
			return 0;
		len++;
	}
}

int tf_slurm_arg_check(const char *arg, char *err, size_t errlen)
{
	if (arg[0] != '-' || !arg[1] || strchr(arg, '\n')) {
		tf_errf(err, errlen,
		        "'%s' is not an sbatch option: write options such as "
		        "'--constraint=tpu' or '--mem=8G'",
		        arg);
		return -EINVAL;
	}
	char name[64] = "";
	const char *val = NULL;
	if (arg[1] == '-') {
		size_t n = strcspn(arg + 2, "=");
		if (!n || n >= sizeof(name) || memchr(arg + 2, ' ', n)) {
			tf_errf(err, errlen,
			        "'%s' is not an sbatch option: give an option and its value as one "
			        "item, joined by '=' ('--mem=8G')",
			        arg);
			return -EINVAL;
		}
		memcpy(name, arg + 2, n);
		name[n] = '\0';
		val = arg[2 + n] == '=' ? arg + 3 + n : NULL;
	} else {
		name[0] = arg[1];
		name[1] = '\0';
		val = arg[2] ? arg + 2 : NULL;
	}
	size_t nlen = strlen(name);
	for (size_t i = 0; i < TF_ARRAY_LEN(owned); i++) {
		/* sbatch takes an unambiguous start of a long name for the name (--arr=1-4) */
		int hit = arg[1] == '-' ? nlen >= 3 && !strncmp(owned[i].name, name, nlen)
		                        : owned[i].letter && owned[i].letter == name[0];
		if (hit) {
			tf_errf(err, errlen, "'%s' cannot be given: %s", arg, owned[i].why);
			return -EINVAL;
		}
	}
	static const char *const mems[] = {"mem", "mem-per-cpu", "mem-per-gpu", NULL};
	int is_time = !strcmp(name, "time") || !strcmp(name, "t") || !strcmp(name, "time-min");
	int is_mem = 0;
	for (size_t i = 0; mems[i]; i++)
		is_mem |= !strcmp(name, mems[i]);
	int is_gres = !strcmp(name, "gres");
	if ((is_time || is_mem || is_gres) && !val) {
		tf_errf(err, errlen, "'%s' needs its value after '=' in the same item", arg);
		return -EINVAL;
	}
	if (is_time && !time_ok(val)) {
		tf_errf(err, errlen,
		        "'%s': Slurm writes a time as MINUTES, MINUTES:SECONDS, "
		        "HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES, "
		        "DAYS-HOURS:MINUTES:SECONDS or UNLIMITED",
		        arg);
		return -EINVAL;
	}
	if (is_mem && !mem_ok(val)) {
		tf_errf(err, errlen,
		        "'%s': sbatch reads memory as a whole number with an optional K, M, G or "
		        "T suffix (16G, 512M)",
		        arg);
		return -EINVAL;
	}
	if (is_gres && !gres_ok(val)) {
		tf_errf(err, errlen,
		        "'%s': a GRES is NAME[:TYPE][:COUNT], several comma-separated (tpu:4)",
		        arg);
		return -EINVAL;
	}
	return 0;
}
