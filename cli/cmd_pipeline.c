/* cmd_pipeline.c — `tpuflow validate` and `tpuflow plan`: load pipeline files, print every
 * problem compiler-style, or show the DAG as levels, JSON or Graphviz DOT. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/engine.h"
#include "orchestrator/pipeline.h"

#include <stdlib.h>
#include <string.h>

/* Collects `--param k=v` arguments; returns 0 or a usage exit code. */
static int add_override(const char *cmd, const char *arg, struct tf_param_override **ov,
                        size_t *nov)
{
	struct tf_param_override o;
	if (tf_param_override_parse(arg, &o))
		return tf_cli_usage_error(cmd, "--param needs NAME=VALUE, got '%s'", arg);
	*ov = tf_xrealloc(*ov, (*nov + 1) * sizeof(**ov));
	(*ov)[(*nov)++] = o;
	return 0;
}

static void validate_usage(FILE *f)
{
	fprintf(f, "usage: tpuflow validate [--param NAME=VALUE]... [--json] FILE...\n"
	           "\n"
	           "Checks pipeline files without running anything: YAML syntax, keys, types,\n"
	           "durations, step types and their 'with' keys, accelerators, needs and cycles,\n"
	           "references and 'when' expressions. Every problem is printed to stderr as\n"
	           "FILE:LINE:COL: error: MESSAGE (with a hint line where one helps).\n"
	           "\n"
	           "  --param NAME=VALUE  check an override against the param's type (repeatable)\n"
	           "  --json              one JSON document on stdout: {ok, files: [{file, ok,\n"
	           "                      steps, diagnostics: [...]}]}\n"
	           "\n"
	           "exit: 0 every file is valid, 65 at least one is not, 64 usage\n");
}

int cmd_validate(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS, {"param", required_argument, NULL, 'p'}, {NULL, 0, NULL, 0}};
	struct tf_param_override *ov = NULL;
	size_t nov = 0;
	int c, rc = TF_EXIT_OK;
	optind = 1;
	while ((c = getopt_long(argc, argv, "hp:", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			validate_usage(stdout);
			free(ov);
			return TF_EXIT_OK;
		}
		if (c == 'p' && !(rc = add_override(argv[0], optarg, &ov, &nov)))
			continue;
		free(ov);
		return rc ? rc : tf_cli_usage_error(argv[0], "unknown option");
	}
	if (optind >= argc) {
		free(ov);
		return tf_cli_usage_error(argv[0], "name at least one pipeline file");
	}
	json_t *files = json_array();
	int all_ok = 1;
	for (int i = optind; i < argc; i++) {
		struct tf_diag_list d;
		struct tf_pipeline *p = NULL;
		tf_diag_list_init(&d);
		int lrc = tf_pipeline_load(argv[i], ov, nov, TF_PIPELINE_ALLOW_UNSET, &p, &d);
		tf_diag_sort(&d);
		tf_diag_print(&d, stderr);
		if (lrc)
			all_ok = 0;
		if (cli->json) {
			json_t *o = json_pack("{s:s, s:b, s:o}", "file", argv[i], "ok", lrc == 0,
			                      "diagnostics", tf_diag_to_json(&d));
			if (p)
				json_object_set_new(o, "steps",
				                    json_integer((json_int_t)p->nsteps));
			json_array_append_new(files, o);
		} else if (!lrc) {
			printf("%s: ok (%zu steps, %d levels)\n", argv[i], p->nsteps, p->nlevels);
		} else {
			printf("%s: %zu error%s\n", argv[i], d.nerrors, d.nerrors == 1 ? "" : "s");
		}
		tf_pipeline_free(p);
		tf_diag_list_release(&d);
	}
	if (cli->json) {
		json_t *doc = json_pack("{s:b, s:o}", "ok", all_ok, "files", files);
		json_dumpf(doc, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(doc);
	} else {
		json_decref(files);
	}
	free(ov);
	return all_ok ? TF_EXIT_OK : TF_EXIT_DATAERR;
}

static void plan_usage(FILE *f)
{
	fprintf(f, "usage: tpuflow plan [--param NAME=VALUE]... [--json | --dot] FILE\n"
	           "\n"
	           "Shows the pipeline's DAG as levels: every step of a level can run at once,\n"
	           "once the levels before it are done. Params show their effective values.\n"
	           "\n"
	           "  --param NAME=VALUE  override a param (type-checked; repeatable)\n"
	           "  --json              one JSON document: {file, name, params, levels, steps}\n"
	           "  --dot               a Graphviz digraph (tpuflow plan --dot F | dot -Tsvg)\n"
	           "\n"
	           "exit: 0 ok, 65 the pipeline has errors (printed to stderr), 64 usage\n");
}

static void print_duration(double s)
{
	if (s >= 3600 && s == (double)(long long)s && (long long)s % 3600 == 0)
		printf("%lldh", (long long)s / 3600);
	else if (s >= 60 && s == (double)(long long)s && (long long)s % 60 == 0)
		printf("%lldm", (long long)s / 60);
	else
		printf("%gs", s);
}

static void print_plan(const struct tf_pipeline *p)
{
	printf("pipeline %s: %zu step%s in %d level%s\n", p->name, p->nsteps,
	       p->nsteps == 1 ? "" : "s", p->nlevels, p->nlevels == 1 ? "" : "s");
	for (size_t i = 0; i < p->nparams; i++) {
		const struct tf_param *par = &p->params[i];
		char *v =
		    par->value ? json_dumps(par->value, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
		printf("  param %s (%s) = %s%s\n", par->name, tf_param_type_name(par->type),
		       v ? v : "(unset)", par->overridden ? "  [--param]" : "");
		free(v);
	}
	int level = -1;
	for (size_t a = 0; a < p->nsteps; a++) {
		const struct tf_step *s = &p->steps[p->topo[a]];
		if (s->level != level) {
			level = s->level;
			printf("level %d\n", level);
		}
		printf("  %-16s %-9s", s->name, tf_step_type_name(s->type));
		if (s->accelerator)
			printf(" on %s", s->accelerator);
		printf(" [%s", tf_executor_name(s->executor));
		if (s->retries.limit)
			printf(", retries %d", s->retries.limit);
		if (s->timeout > 0) {
			printf(", timeout ");
			print_duration(s->timeout);
		}
		/* "cached" is a state a step ends in; here: whether results may be reused */
		if (s->cache && tf_step_schema(s->type)->cacheable)
			printf(", cache on");
		printf("]");
		if (s->nneeds) {
			printf(" after ");
			for (size_t k = 0; k < s->nneeds; k++)
				printf("%s%s", k ? ", " : "", p->steps[s->needs[k]].name);
		}
		if (s->when_source)
			printf(" when %s", s->when_source);
		putchar('\n');
	}
}

int cmd_plan(int argc, char **argv, struct tf_cli *cli)
{
	enum { OPT_DOT = 0x2000 };
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"param", required_argument, NULL, 'p'},
	                                     {"dot", no_argument, NULL, OPT_DOT},
	                                     {NULL, 0, NULL, 0}};
	struct tf_param_override *ov = NULL;
	size_t nov = 0;
	int c, rc = TF_EXIT_OK, dot = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "hp:", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			plan_usage(stdout);
			free(ov);
			return TF_EXIT_OK;
		}
		if (c == OPT_DOT) {
			dot = 1;
			continue;
		}
		if (c == 'p' && !(rc = add_override(argv[0], optarg, &ov, &nov)))
			continue;
		free(ov);
		return rc ? rc : tf_cli_usage_error(argv[0], "unknown option");
	}
	if (optind + 1 != argc) {
		free(ov);
		return tf_cli_usage_error(argv[0], "name exactly one pipeline file");
	}
	if (dot && cli->json) {
		free(ov);
		return tf_cli_usage_error(argv[0], "choose one of --json and --dot");
	}
	struct tf_diag_list d;
	struct tf_pipeline *p = NULL;
	tf_diag_list_init(&d);
	int lrc = tf_pipeline_load(argv[optind], ov, nov, TF_PIPELINE_ALLOW_UNSET, &p, &d);
	tf_diag_sort(&d);
	tf_diag_print(&d, stderr);
	tf_diag_list_release(&d);
	free(ov);
	if (lrc)
		return TF_EXIT_DATAERR;
	if (cli->json) {
		json_t *doc = tf_pipeline_plan_json(p);
		json_dumpf(doc, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(doc);
	} else if (dot) {
		tf_pipeline_plan_dot(p, stdout);
	} else {
		print_plan(p);
	}
	tf_pipeline_free(p);
	return TF_EXIT_OK;
}
