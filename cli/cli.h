/* cli.h — what every `tpuflow` subcommand receives, and the helpers they share.
 *
 * A subcommand is `int cmd_NAME(int argc, char **argv, struct tf_cli *cli)`: argv[0] is the
 * subcommand's name, the rest its own arguments (parse them with getopt_long; accept the
 * common options through tf_cli_common_option). It returns a process exit code (enum tf_exit).
 */
#ifndef TF_CLI_H
#define TF_CLI_H

#include <getopt.h>
#include <stdio.h>

struct tf_store;
struct tf_cli {
	const char *home_opt; /* --home DIR as given, NULL when absent */
	int json;             /* --json: print one JSON document on stdout */
	const char *argv0;    /* how the program was invoked, for re-executing itself */
	const char *remote;   /* --remote URL or $TPUFLOW_URL: a daemon's API, NULL: local */
	/* Prepared by main before the command runs, by the flags of its row in the command
	 * table (cli/main.c: NEED_HOME, NEED_DB, NEED_DB_AS_IS); main releases them after. */
	const char *home;    /* the state home's path (--home, $TPUFLOW_HOME, ./.tpuflow) */
	struct tf_store *db; /* NEED_DB: the home's database, open and migrated; NEED_DB_AS_IS:
	                        open read-only as it is, NULL when there is none */
};

/* Long options every subcommand accepts; put TF_CLI_COMMON_OPTIONS at the start of a
 * getopt_long table and pass unknown option codes to tf_cli_common_option. */
enum { TF_OPT_HOME = 0x1000, TF_OPT_JSON, TF_OPT_HELP_LONG };
#define TF_CLI_COMMON_OPTIONS                                                                      \
	{"home", required_argument, NULL, TF_OPT_HOME}, {"json", no_argument, NULL, TF_OPT_JSON},  \
	{                                                                                          \
		"help", no_argument, NULL, 'h'                                                     \
	}

/* Handles --home and --json; returns 1 if the option was one of them, 0 if not. */
int tf_cli_common_option(struct tf_cli *cli, int opt, const char *arg);

/* The state home: --home, else $TPUFLOW_HOME, else ./.tpuflow. Returns a new string the
 * caller owns; the directory is created if `create` is set (NULL and a message on failure). */
char *tf_cli_home(const struct tf_cli *cli, int create);

/* The state home's object store URL ($TPUFLOW_STORE, else file://HOME/objects: what a
 * command without --store uses), the home created. A new string, or NULL with a message on
 * stderr. */
char *tf_cli_home_store_url(const struct tf_cli *cli);

/* The state home's database, opened and migrated (the home is created if missing): what
 * NEED_DB gives a command in cli->db, for a command that needs it only sometimes. NULL with
 * "tpuflow CMD: why" on stderr and *exit_code set (TF_EXIT_CONFIG for a database newer than
 * this build, else TF_EXIT_UNAVAILABLE). The caller closes it with tf_store_close. */
struct tf_store *tf_cli_open_store(const struct tf_cli *cli, const char *cmd, int *exit_code);

/* Reports what a store call that acts on one named thing returned (removing a hook,
 * revoking a token): -ENOENT is "tpuflow CMD: no WHAT 'NAME'" and exit 66, another failure
 * the store's message and 69; success prints "DONE WHAT 'NAME'", or {JSON_KEY: NAME} with
 * --json. Returns the exit code. */
int tf_cli_named_outcome(const struct tf_cli *cli, const char *cmd, struct tf_store *st, int rc,
                         const char *what, const char *name, const char *done,
                         const char *json_key);

/* Prints "tpuflow CMD: MESSAGE" and the usage hint to stderr; returns TF_EXIT_USAGE. */
int tf_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses S, the value of option FLAG of CMD, as a whole decimal integer from MIN to MAX into
 * *OUT. Returns 0, or the usage error's exit code after printing it (*OUT untouched). */
int tf_cli_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max,
                     long long *out);

/* Parses S, the value of option FLAG of CMD, as a point in time: an age back from now (30m,
 * 2d, 1h30m, or seconds) or a local date and time (2026-11-29, "2026-11-29 14:00[:05]").
 * 0 with *OUT in Unix seconds, or the usage error's exit code after printing it. */
int tf_cli_parse_since(const char *cmd, const char *flag, const char *s, double *out);

/* Reports a run id that tf_run_find (or the API) did not resolve: `rc` -EEXIST is an
 * ambiguous prefix ("tpuflow CMD: run id prefix 'ARG' is ambiguous: ...", exit 64), anything
 * else no such run ("tpuflow CMD: no run 'ARG' ...", exit 66). Returns the exit code. */
int tf_cli_run_unresolved(const char *cmd, const char *arg, int rc);

/* A JSON number of Unix seconds as local "YYYY-MM-DD HH:MM:SS", "-" for anything else. */
#include <jansson.h>
void tf_cli_fmt_time(json_t *v, char *out, size_t n);

/* The one way a command prints its --json document: indented by two, keys in the order they
 * were added, numbers to 15 significant digits, then a newline. `doc` is borrowed. 0, or
 * TF_EXIT_SOFTWARE when it cannot be encoded. */
int tf_cli_print_json(FILE *out, const json_t *doc);

/* The subcommand table's entry points (one file per group: cli/cmd_GROUP.c). */
int cmd_validate(int argc, char **argv, struct tf_cli *cli);
int cmd_plan(int argc, char **argv, struct tf_cli *cli);
int cmd_kinds(int argc, char **argv, struct tf_cli *cli);
int cmd_db(int argc, char **argv, struct tf_cli *cli);
int cmd_run(int argc, char **argv, struct tf_cli *cli);
int cmd_runs(int argc, char **argv, struct tf_cli *cli);
int cmd_gc(int argc, char **argv, struct tf_cli *cli);
/* `runs delete RUN... [--dry-run]` (cli/cmd_gc.c), on the open database of `home` */
struct tf_store;
int tf_cli_runs_delete(struct tf_store *st, const struct tf_cli *cli, const char *home,
                       char **runs, int nruns, int dry_run);
/* What `runs delete` and `gc` print, from the reports of orchestrator/retention.h
 * (tf_run_delete_report_json's objects, as DELETE /api/v1/runs/{id} and POST /api/v1/runs:gc
 * answer them), for the local commands and --remote alike (cli/cmd_gc.c).
 * tf_cli_delete_print: one run's report `rep` (borrowed), with `json` appended to the array
 * `arr`, else printed ("deleted run R: N object(s), ..." on stdout, its error on stderr).
 * tf_cli_gc_print: gc's document {applied, runs} (borrowed) as text or JSON.
 * Both return the exit code: 0, 66 an unknown run, 75 a live or pending one, 69 a store that
 * did not answer, 70 another failure (gc: the first of its runs'). */
int tf_cli_delete_print(int json, json_t *rep, json_t *arr);
int tf_cli_gc_print(int json, json_t *doc);
/* Parses `gc`'s options (argv[0] is "gc"): the policy into *pol (its pipeline points into
 * argv), --older-than as given into *older_than (NULL without it), --apply into *apply.
 * Returns -1 to go on, else the exit code to end with (--help printed, a usage error). */
struct tf_gc_policy;
int tf_cli_gc_options(int argc, char **argv, struct tf_cli *cli, struct tf_gc_policy *pol,
                      const char **older_than, int *apply);
int cmd_daemon(int argc, char **argv, struct tf_cli *cli);
int cmd_models(int argc, char **argv, struct tf_cli *cli);
int cmd_tokens(int argc, char **argv, struct tf_cli *cli);
int cmd_hooks(int argc, char **argv, struct tf_cli *cli);
int cmd_alerts(int argc, char **argv, struct tf_cli *cli);
int cmd_accel(int argc, char **argv, struct tf_cli *cli);
int cmd_store(int argc, char **argv, struct tf_cli *cli);
int cmd_ckpt(int argc, char **argv, struct tf_cli *cli);
int cmd_slices(int argc, char **argv, struct tf_cli *cli);
int cmd_pipelines(int argc, char **argv, struct tf_cli *cli);
int cmd_schedules(int argc, char **argv, struct tf_cli *cli);
int cmd_sched(int argc, char **argv, struct tf_cli *cli);
int cmd_data(int argc, char **argv, struct tf_cli *cli);
int cmd_train(int argc, char **argv, struct tf_cli *cli);
int cmd_eval(int argc, char **argv, struct tf_cli *cli);
int cmd_predict(int argc, char **argv, struct tf_cli *cli);
int cmd_serve(int argc, char **argv, struct tf_cli *cli);
int cmd_step(int argc, char **argv, struct tf_cli *cli);
/* `tpuflow step job` (cmd_step_job.c), what a Slurm job of an attempt runs */
int cmd_step_job(int argc, char **argv, struct tf_cli *cli);

/* `run`, `runs ...`, `gc` and `models ...` against the REST API at `url` (cli/remote.c);
 * argv[0] is the command. Returns an exit code. */
int tf_cli_remote(struct tf_cli *cli, const char *url, int argc, char **argv);

/* `runs show`'s text from a run's document (tf_run_describe's, as GET /api/v1/runs/{id}
 * answers it, with the local command's param_values when it has them) (cli/cmd_run.c). */
void tf_cli_runs_show_print(json_t *d);

/* `models show` (a model, or one version when `version` is set) and `models compare` (two
 * version documents, as text or one JSON document) from the registry's JSON (cli/cmd_models.c);
 * the same printers serve the remote answers. */
void tf_cli_models_show(const char *model, json_t *doc, int version);
void tf_cli_models_compare(const char *model, const char *r1, const char *r2, json_t *a,
                           json_t *b, int json);

/* Prints a scheduler's pools, queue and utilization (text, or one JSON document) to out:
 * what `tpuflow slices` shows, for any scheduler state (the engine's or the daemon's). */
struct tf_sched;
int tf_cli_slices_print(struct tf_sched *s, double now, int json, FILE *out);

#endif
