/* pipeline.h — a pipeline YAML file loaded into typed, checked structs.
 *
 * tf_pipeline_load reads the file with libyaml under hard limits (size, nesting depth,
 * materialised nodes, alias expansions), then checks everything it can before anything runs:
 * keys, types, durations, step types and their `with` keys, accelerator names, `needs`
 * (unknown names, cycles), references (to params, and to outputs/metrics of upstream steps
 * declared by the step-type schema) and `when` expressions. Every problem is reported as a
 * FILE:LINE:COL diagnostic. docs/pipeline.md is the user's reference for the format.
 *
 * Ownership: a loaded tf_pipeline owns all its strings, arrays, templates and expressions;
 * tf_pipeline_free releases everything. Nothing in it is modified after loading, so several
 * threads may read one pipeline at once. */
#ifndef TF_PIPELINE_H
#define TF_PIPELINE_H

#include <jansson.h>
#include <stddef.h>

#include "executors/executor.h"
#include "orchestrator/cron.h"
#include "orchestrator/diag.h"
#include "orchestrator/expr.h"

/* Hard limits on the input (docs/pipeline.md "Limits"). */
#define TF_PIPELINE_MAX_BYTES (1u << 20) /* 1 MiB file */
#define TF_PIPELINE_MAX_DEPTH 32         /* nested collections */
#define TF_PIPELINE_MAX_NODES 250000     /* nodes materialised, aliases expanded */
#define TF_PIPELINE_MAX_ALIASES 1000     /* alias uses */
#define TF_PIPELINE_MAX_STEPS 10000      /* steps in one pipeline */
#define TF_PIPELINE_MAX_PARAMS 1000      /* params in one pipeline */

/* ---- params ------------------------------------------------------------------------- */

enum tf_param_type {
	TF_PARAM_INT,    /* 64-bit integer (JSON integer) */
	TF_PARAM_FLOAT,  /* double (JSON real; integers are accepted and widened) */
	TF_PARAM_STRING, /* UTF-8 string */
	TF_PARAM_BOOL,   /* true / false */
	TF_PARAM_LIST,   /* list of scalars (JSON array); overrides as "a,b,c" or "[1,2]" */
	TF_PARAM_LAST
};

struct tf_param {
	char *name;              /* key under `params` (owned) */
	enum tf_param_type type; /* declared `type` (default: string) */
	json_t *default_value;   /* `default` converted to the type, NULL when absent (owned ref) */
	json_t *value;           /* effective value: the override, else the default; NULL when
	                            neither exists (only with TF_PIPELINE_ALLOW_UNSET) (owned ref) */
	char *description;       /* `description` or NULL (owned) */
	int overridden;          /* 1 when value came from a --param override */
	char *text;              /* an int or float value as written (default or override), for
	                            argv and other text: 1.10 stays 1.10; NULL otherwise (owned) */
	int line, col;           /* position of the param's name */
};

/* One `--param k=v` from the command line (borrowed strings). */
struct tf_param_override {
	const char *name;  /* k */
	const char *value; /* v, converted to the param's declared type */
};

/* Splits "k=v" into an override pointing into `arg` (no copy). 0 or -EINVAL. */
int tf_param_override_parse(const char *arg, struct tf_param_override *out);

/* The overrides a run recorded as a JSON object of strings (runs.params): a new array (free it;
 * its strings point into `obj`, which must outlive it) and its length in *n. NULL or a
 * non-object gives an empty array; a value that is not a string reads as "". */
struct tf_param_override *tf_param_overrides_from_json(const json_t *obj, size_t *n);

/* ---- steps -------------------------------------------------------------------------- */

enum tf_step_type {
	TF_STEP_DATA_PREP, /* "data_prep": convert raw data into sharded TFRecords */
	TF_STEP_TRAIN,     /* "train": train a model on an emulated TPU slice */
	TF_STEP_EVALUATE,  /* "evaluate": score a model on a dataset */
	TF_STEP_REGISTER,  /* "register": record a model version in the registry */
	TF_STEP_DEPLOY,    /* "deploy": point an alias at a model version */
	TF_STEP_SHELL,     /* "shell": run an argv (never a shell string) */
	TF_STEP_LAST       /* the built-in kinds end here; tf_step_kind_add numbers further
	                      kinds from here up to TF_STEP_MAX */
};
#define TF_STEP_MAX (TF_STEP_LAST + 16)

/* The failure classes a retry policy can name in `on:` (enum tf_fail_class of
 * executors/executor.h): error, timeout, preempted and infra, as 1u << class each. */
#define TF_RETRY_ON_ALL                                                                    \
	((1u << TF_FAIL_ERROR) | (1u << TF_FAIL_TIMEOUT) | (1u << TF_FAIL_PREEMPTED) |        \
	 (1u << TF_FAIL_INFRA))

struct tf_retry_policy {
	int limit;          /* retries after the first attempt (0: none); default 0 */
	double backoff;     /* seconds before the first retry; default 10 */
	double factor;      /* each further delay is multiplied by this (>= 1); default 2 */
	double max_backoff; /* cap on one delay, seconds; default 600 */
	unsigned on;        /* bitmask of 1u << tf_fail_class retried; default TF_RETRY_ON_ALL */
};

enum tf_executor_kind {
	TF_EXECUTOR_INPROCESS, /* "inprocess": a function on a thread of this process */
	TF_EXECUTOR_LOCAL,     /* "local": a child process (argv, process group, timeout) */
	TF_EXECUTOR_SLURM,     /* "slurm": submitted with sbatch */
	TF_EXECUTOR_LAST
};

/* `slurm:` — how a step's Slurm job is submitted (docs/slurm.md): on the step, key by key
 * over the one in `defaults`. */
struct tf_slurm_opts {
	char *partition; /* --partition, or NULL (owned) */
	char *account;   /* --account, or NULL (owned) */
	char *qos;       /* --qos, or NULL (owned) */
	char **args;     /* further sbatch arguments, each starting with '-' (owned) */
	size_t nargs;
};

/* A `with` value: a scalar template, a list or a map of further values. */
enum tf_with_kind {
	TF_WITH_SCALAR, /* tmpl holds the template */
	TF_WITH_LIST,   /* items[] are the elements (their key is NULL) */
	TF_WITH_MAP,    /* items[] are the entries (key set) */
	TF_WITH_LAST
};

struct tf_with_value {
	char *key;               /* map key (entries of a step's `with` and of maps), else NULL */
	enum tf_with_kind kind;  /* scalar, list or map */
	struct tf_template tmpl; /* TF_WITH_SCALAR: the value as a template */
	int plain;               /* TF_WITH_SCALAR: written unquoted, so `10` renders as a
	                            number and `true` as a boolean; quoted stays a string */
	struct tf_with_value *items; /* TF_WITH_LIST / TF_WITH_MAP children (owned) */
	size_t nitems;               /* number of children */
	int line, col;               /* position of the value */
};

struct tf_step {
	char *name;                     /* unique within the pipeline (owned) */
	enum tf_step_type type;         /* `type` */
	size_t *needs;                  /* indices into tf_pipeline.steps of `needs` (owned) */
	size_t nneeds;                  /* number of needs */
	struct tf_with_value *with;     /* entries of `with` in file order, key set (owned) */
	size_t nwith;                   /* number of with entries */
	char *when_source;              /* `when` as written, or NULL (owned) */
	struct tf_expr *when;           /* parsed and type-checked `when`, or NULL (owned) */
	struct tf_retry_policy retries; /* `retries`, else `defaults.retries`, else built-in */
	double timeout;                 /* seconds; 0 = no timeout (step, else defaults) */
	char *accelerator;              /* canonical slice name such as "v4-8", or NULL (owned) */
	enum tf_executor_kind executor; /* step, else defaults, else inprocess (shell: local) */
	struct tf_slurm_opts slurm;     /* `slurm:` (step over defaults), for executor slurm */
	int cache;                      /* reuse results when the inputs hash the same (shell:
	                                   only when asked, explicitly or by defaults.cache) */
	char **cache_inputs;            /* `cache_inputs`: absolute paths of files whose
	                                   contents join the cache key (owned), or NULL */
	size_t ncache_inputs;
	int priority;   /* train slices: `priority` 0..9, else `defaults.priority`, else -1 (the
	                   run's) */
	char *project;  /* train slices: `project`, else `defaults.project`, else NULL (the
	                   run's) (owned) */
	char **outputs; /* outputs this step declares (schema or shell's with.outputs) */
	size_t noutputs;
	char **metrics; /* metrics this step declares */
	size_t nmetrics;
	int level;     /* plan level: 0 without needs, else 1 + max level of needs */
	uint64_t log_max; /* `log_max`, else `defaults.log_max`: cap on each output stream of a
	                     child process's log; 0: $TPUFLOW_LOG_MAX, else 64M */
	int uses_env;  /* its `with` has an ${env.NAME}: what is recorded of it shows the
	                  reference, never the value */
	int final;     /* a `finally` step: it needs every step of `steps` and runs once they
	                  are final, whatever their outcome (skipped or failed needs do not skip
	                  it); ${run.state} tells it the outcome */
	int line, col; /* position of the step's `name` (or of the step) */
};

/* `defaults:` — applied to every step that does not set the key itself. */
struct tf_step_defaults {
	struct tf_retry_policy retries; /* default retry policy */
	double timeout;                 /* seconds, 0 = none */
	int has_executor;               /* 1 when `defaults.executor` was given */
	enum tf_executor_kind executor; /* valid when has_executor */
	int cache;                      /* default for `cache` (built-in: 1, shell steps 0) */
	int has_cache;                  /* 1 when `defaults.cache` was given (applies to shell) */
	struct tf_slurm_opts slurm;     /* `defaults.slurm` */
	int priority;                   /* `defaults.priority`, -1 when not given */
	uint64_t log_max;               /* `defaults.log_max`, 0 when not given */
	char *project;                  /* `defaults.project` or NULL (owned) */
};

enum tf_sched_concurrency {
	TF_CONCURRENCY_ALLOW,   /* a tick fires even while an earlier run is active */
	TF_CONCURRENCY_FORBID,  /* a tick is skipped while a run of the pipeline is active */
	TF_CONCURRENCY_REPLACE, /* the active run is asked to stop and the tick fires */
	TF_CONCURRENCY_LAST
};

enum tf_sched_catchup {
	TF_CATCHUP_NONE,   /* ticks missed (the daemon was down) are not run */
	TF_CATCHUP_LATEST, /* the newest missed tick runs */
	TF_CATCHUP_ALL,    /* every missed tick runs, oldest first, up to `catchup_max` */
	TF_CATCHUP_LAST
};

/* `schedule:` — when the registered pipeline runs by itself (tpuflow pipelines add). */
struct tf_pipeline_schedule {
	char *cron;                            /* the cron text as written (owned) */
	struct tf_cron spec;                   /* parsed */
	char *timezone;                        /* IANA zone, default "UTC" (owned) */
	enum tf_sched_concurrency concurrency; /* default forbid */
	enum tf_sched_catchup catchup;         /* default latest */
	int catchup_max;                       /* `all`: at most this many missed ticks (10) */
	double starting_deadline;              /* a tick older than this is missed (0: none) */
	int line, col;                         /* position of `schedule` */
};

/* `alerts:` — one route of the pipeline's events to hooks of the state home (docs/alerts.md). */
struct tf_alert_route {
	char **on;            /* event names (owned) */
	size_t non;
	char **to;            /* hook names (owned) */
	size_t nto;
	int *to_lines;        /* line and column of each hook name: 2 * nto ints (owned) */
	char *when_source;    /* `when` as written, or NULL (owned) */
	struct tf_expr *when; /* parsed and type-checked, or NULL (owned) */
	int line, col;        /* position of the route */
};

struct tf_pipeline {
	char *path;              /* file name as given (owned) */
	char *source;            /* the file's bytes, NUL-terminated (owned) */
	size_t source_len;       /* length of source */
	char *name;              /* `name` (required) (owned) */
	char *description;       /* `description` or NULL (owned) */
	struct tf_param *params; /* in file order (owned) */
	size_t nparams;
	struct tf_step_defaults defaults; /* `defaults` with built-ins filled in */
	char *storage;                    /* `storage` object-store URL, or NULL (owned) */
	int priority;  /* `priority` of the run's train slices, 0..9; -1 when not given */
	char *project; /* `project` the run's slices are accounted to, or NULL (owned) */
	struct tf_pipeline_schedule *schedule; /* `schedule`, or NULL (owned) */
	struct tf_alert_route *alerts;         /* `alerts:` routes in file order (owned) */
	size_t nalerts;
	struct tf_step *steps;                 /* in file order, `steps` then `finally` (owned) */
	size_t nsteps;
	size_t nmain;                          /* steps[0..nmain) are `steps`, the rest
	                                          `finally` */
	size_t *topo; /* step indices in a topological order: by level, then file
	                 order (owned) */
	int nlevels;  /* 1 + highest step level (0 when there are no steps) */
};

/* Flags for tf_pipeline_load. */
enum {
	/* A param without default and without override is accepted (its value stays NULL):
	 * `validate` and `plan` use it; the run engine does not, so a run always has values. */
	TF_PIPELINE_ALLOW_UNSET = 1u << 0,
	/* Every ${env.NAME} must be set in this process's environment now (a new run); without
	 * it an unset one is a warning under TF_PIPELINE_ALLOW_UNSET (validate, plan) and
	 * otherwise left to the step that uses it (a resumed run). */
	TF_PIPELINE_ENV_SET = 1u << 1,
};

/* Loads and checks `path`. Problems (all of them) are appended to `diags`. Returns 0 with
 * *out set (the caller owns it), or -EINVAL when the file has errors (see diags), -EFBIG when
 * it is too large, or another negative errno when it cannot be read (a diagnostic is added
 * for those too). `ov` may be NULL when nov is 0. */
int tf_pipeline_load(const char *path, const struct tf_param_override *ov, size_t nov,
                     unsigned flags, struct tf_pipeline **out, struct tf_diag_list *diags);

/* The same from memory (`name` is used in diagnostics). `buf` need not be NUL-terminated. */
int tf_pipeline_load_buffer(const char *name, const char *buf, size_t len,
                            const struct tf_param_override *ov, size_t nov, unsigned flags,
                            struct tf_pipeline **out, struct tf_diag_list *diags);

/* The top-level `name:` of pipeline text, read without loading it (for naming text that came
 * without a file in diagnostics); NULL when it has none or the YAML breaks before it. The
 * caller frees the string. */
char *tf_pipeline_peek_name(const char *buf, size_t len);

void tf_pipeline_free(struct tf_pipeline *p);

/* Lookups by name; NULL / -1 when absent. */
const struct tf_param *tf_pipeline_param(const struct tf_pipeline *p, const char *name);
int tf_pipeline_step_index(const struct tf_pipeline *p, const char *name);
const struct tf_with_value *tf_step_with(const struct tf_step *s, const char *key);

/* Renders a step's `with` into a new JSON object (caller releases): scalars are rendered
 * templates (plain `10` / `true` become numbers / booleans, a whole `${...}` keeps the
 * value's type), lists become arrays, maps objects. NULL with err on a missing value. */
json_t *tf_step_render_with(const struct tf_step *s, tf_lookup_fn fn, void *ctx, char *err,
                            size_t errlen);

/* A lookup for params only (ctx = the pipeline): handy for the engine's own lookup to fall
 * back to, and for `plan`. */
json_t *tf_pipeline_lookup_param(void *ctx, const struct tf_ref *ref);

/* Every param with the value a run of `p` uses: [{name, value, text (as written, or the
 * value as text; null when unset), source: "param" (an override) or "default"}] (new
 * reference); `runs show` and `run --dry-run` print it. */
json_t *tf_pipeline_param_values(const struct tf_pipeline *p);

/* The plan: {name, levels: [[step...]...], steps: [{name, type, needs, level, ...}]} as JSON
 * (new reference), and as a Graphviz DOT document written to f. */
json_t *tf_pipeline_plan_json(const struct tf_pipeline *p);
void tf_pipeline_plan_dot(const struct tf_pipeline *p, FILE *f);

/* Names for enums ("train", "timeout", "local", "int"); NULL for out-of-range values. */
const char *tf_step_type_name(enum tf_step_type t);
const char *tf_executor_name(enum tf_executor_kind e);
const char *tf_param_type_name(enum tf_param_type t);
const char *tf_concurrency_name(enum tf_sched_concurrency c);
const char *tf_catchup_name(enum tf_sched_catchup c);

/* 1 when every Slurm node can reach the object store at `url`: s3://, or a file:// (or plain)
 * absolute path under a directory listed in TPUFLOW_SHARED_STORAGE (colon-separated). */
int tf_storage_shared(const char *url);

/* Parses a duration: "30s", "5m", "1h30m", "250ms", "2d", or a plain number of seconds
 * ("90", "1.5"). 0 and *seconds set, or -EINVAL. */
int tf_duration_parse(const char *s, double *seconds);

/* ---- the step-type schema ---------------------------------------------------------- */

/* How a `with` key's literal value is checked. */
enum tf_with_check {
	TF_WCHECK_STRING,   /* any scalar */
	TF_WCHECK_INT,      /* integer */
	TF_WCHECK_NUMBER,   /* integer or float */
	TF_WCHECK_BOOL,     /* true / false */
	TF_WCHECK_ENUM,     /* one of `choices` */
	TF_WCHECK_INT_LIST, /* list of integers */
	TF_WCHECK_STR_LIST, /* list of strings */
	TF_WCHECK_STR_MAP,  /* map of string to string */
	TF_WCHECK_STEP,     /* name of an upstream step */
	TF_WCHECK_DURATION, /* seconds: a number or a duration (tf_duration_parse); bounds in s */
	TF_WCHECK_LAST
};

/* Rules on a `with` value beyond its type, checked at load with the value's position when it
 * is written literally (or is a param whose value is known then), else by the step at run
 * time. */
enum {
	TF_WRULE_MIN = 1u << 0,        /* number (or each item of an int list) >= min */
	TF_WRULE_MIN_OPEN = 1u << 1,   /* ... > min */
	TF_WRULE_MAX = 1u << 2,        /* ... <= max */
	TF_WRULE_MAX_OPEN = 1u << 3,   /* ... < max */
	TF_WRULE_NONEMPTY = 1u << 4,   /* a list with at least one item */
	TF_WRULE_UNIQUE = 1u << 5,     /* list items distinct */
	TF_WRULE_ENV_NAMES = 1u << 6,  /* map keys are environment variable names */
	TF_WRULE_MODEL_NAME = 1u << 7, /* a registry model name (docs/registry.md) */
	TF_WRULE_ALIAS = 1u << 8,      /* a registry alias: a name, not `latest` or a number */
	TF_WRULE_VERSION = 1u << 9,    /* a version: N >= 1, vN, latest or an alias */
};

struct tf_with_key {
	const char *key;            /* the `with` key */
	enum tf_with_check check;   /* how its value is checked */
	const char *const *choices; /* TF_WCHECK_ENUM: NULL-terminated allowed values */
	const char *help;           /* one line for docs and hints */
	unsigned rules;             /* TF_WRULE_* */
	double min, max;            /* bounds for the MIN/MAX rules */
	const char *if_value;       /* when this key has this literal value ... */
	const char *requires;       /* ... the step's `with` must also set this key */
};

struct tf_step_run;
struct tf_ml_ctx;

/* One row per step kind: everything the loader (name, `with`, outputs, metrics), the engine
 * (run, cacheable, needs_slice), `step exec` (ml) and the docs know of it. Adding a kind is
 * one row, one function, its docs and a test (tests/test_engine.c adds one from the test). */
struct tf_step_schema {
	enum tf_step_type type;         /* the step type (tf_step_kind_add sets it for new rows) */
	const char *name;               /* "train" */
	const struct tf_with_key *with; /* allowed `with` keys, terminated by a NULL key */
	const char *const *outputs;     /* declared outputs, NULL-terminated */
	const char *const *metrics;     /* declared metrics, NULL-terminated */
	int dynamic;                    /* 1 for shell: outputs/metrics come from `with` */
	int cacheable;                  /* results may come from the step cache (not register,
	                                   deploy: they act on the registry) */
	int needs_slice;                /* each attempt first holds a TPU slice (train) */
	int (*run)(struct tf_step_run *r); /* the kind (orchestrator/step_kind.h) */
	/* the ml step behind an `inprocess`/`local`/`slurm` run (ml/steps.h), NULL for others */
	int (*ml)(const json_t *with, const struct tf_ml_ctx *ctx, json_t *outputs,
	          json_t *metrics, char *err, size_t errlen);
};

/* A row's value in words for people (usage, docs, errors): its type, allowed words, bounds
 * and rules, e.g. "integer, between 1 and 4096", "one of `sgd`, `adam`, `adamw` or `lars`"
 * (each word wrapped in `quote`). */
struct tf_buf;
void tf_with_key_describe(const struct tf_with_key *wk, struct tf_buf *b, const char *quote);
/* A command-line text (`--epochs 5`) as the JSON value of the row, checked as the loader
 * checks a literal: type, allowed words, bounds (a list is "256,128"; a bool flag without a
 * value, text NULL, is true). A new reference, or NULL with err ("WHAT wants ..., not '...'"). */
json_t *tf_with_key_value(const struct tf_with_key *wk, const char *text, const char *what,
                          char *err, size_t errlen);

/* The row of a step type; NULL for none. */
const struct tf_step_schema *tf_step_schema(enum tf_step_type t);
/* The row named `name` ("train"); NULL for none. */
const struct tf_step_schema *tf_step_schema_find(const char *name);
/* Every kind's name in type order, NULL-terminated (valid until the next tf_step_kind_add). */
const char *const *tf_step_kind_names(void);
/* Adds a kind: `row` (borrowed for the life of the program; its `type` is ignored) gets the
 * next type above the built-in ones, returned in *type. Call it before loading pipelines
 * and before any engine starts (not thread-safe). 0, -EEXIST when the name is taken,
 * -EINVAL without a name or run function, -ENOSPC past TF_STEP_MAX. */
int tf_step_kind_add(const struct tf_step_schema *row, enum tf_step_type *type);

#endif
