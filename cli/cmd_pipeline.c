/* cmd_pipeline.c — `tpuflow validate` and `tpuflow plan`: load pipeline files, print every
 * problem compiler-style, or show the DAG as levels, JSON or Graphviz DOT; `tpuflow kinds`:
 * the step-kind table as text, JSON or the Markdown of docs/pipeline.md's step reference. */
#include "cli/cli.h"
#include "common/buf.h"
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
		tf_cli_print_json(stdout, doc);
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
		rc = tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else if (dot) {
		tf_pipeline_plan_dot(p, stdout);
	} else {
		print_plan(p);
	}
	tf_pipeline_free(p);
	return rc;
}

/* ---- kinds ---- */

static void kinds_usage(FILE *f)
{
	fprintf(f, "usage: tpuflow kinds [--json | --markdown] [KIND...]\n\n"
	           "The step kinds a pipeline may use, from the table the loader, the engine and\n"
	           "`step exec` read: each kind's `with` keys (type, allowed values, bounds),\n"
	           "outputs and metrics. --markdown prints the step reference of\n"
	           "docs/pipeline.md (the test suite checks that the doc matches).\n");
}

static void names_md(struct tf_buf *b, const char *const *names, const char *none)
{
	if (names[0])
		tf_buf_names(b, names, "and", "`");
	else
		tf_buf_printf(b, "%s", none);
}

/* One kind as the Markdown of docs/pipeline.md. */
static void kind_markdown(const struct tf_step_schema *sc, struct tf_buf *b)
{
	tf_buf_printf(b, "### `%s`\n\n", sc->name);
	tf_buf_printf(b, "Outputs: ");
	names_md(b, sc->outputs, sc->dynamic ? "as listed in `with.outputs`" : "none");
	tf_buf_printf(b, ". Metrics: ");
	names_md(b, sc->metrics, sc->dynamic ? "as listed in `with.metrics`" : "none");
	tf_buf_printf(b, ".%s%s\n\n", sc->cacheable ? " Results may come from the step cache." : "",
	              sc->needs_slice ? " Each attempt first holds a TPU slice." : "");
	tf_buf_printf(b, "| `with` key | value | what |\n|---|---|---|\n");
	for (const struct tf_with_key *k = sc->with; k->key; k++) {
		tf_buf_printf(b, "| `%s` | ", k->key);
		tf_with_key_describe(k, b, "`");
		tf_buf_printf(b, " | %s |\n", k->help);
	}
	tf_buf_printf(b, "\n");
}

static json_t *kind_json(const struct tf_step_schema *sc)
{
	json_t *with = json_array(), *outs = json_array(), *mets = json_array();
	for (const struct tf_with_key *k = sc->with; k->key; k++) {
		struct tf_buf b = {0};
		tf_with_key_describe(k, &b, "");
		json_array_append_new(with, json_pack("{s:s, s:s, s:s}", "key", k->key, "value",
		                                      tf_buf_str(&b), "help", k->help));
		tf_buf_release(&b);
	}
	for (size_t i = 0; sc->outputs[i]; i++)
		json_array_append_new(outs, json_string(sc->outputs[i]));
	for (size_t i = 0; sc->metrics[i]; i++)
		json_array_append_new(mets, json_string(sc->metrics[i]));
	return json_pack("{s:s, s:o, s:o, s:o, s:b, s:b, s:b}", "name", sc->name, "with", with,
	                 "outputs", outs, "metrics", mets, "dynamic", sc->dynamic, "cacheable",
	                 sc->cacheable, "needs_slice", sc->needs_slice);
}

static void kind_text(const struct tf_step_schema *sc)
{
	printf("%s%s%s\n", sc->name, sc->cacheable ? " (cacheable)" : "",
	       sc->needs_slice ? " (holds a TPU slice)" : "");
	for (const struct tf_with_key *k = sc->with; k->key; k++) {
		struct tf_buf v = {0};
		tf_with_key_describe(k, &v, "");
		printf("  %-22s %s\n  %-22s   %s\n", k->key, k->help, "", tf_buf_str(&v));
		tf_buf_release(&v);
	}
	struct tf_buf b = {0};
	tf_buf_printf(&b, "  outputs: ");
	names_md(&b, sc->outputs, sc->dynamic ? "as listed in with.outputs" : "none");
	tf_buf_printf(&b, "; metrics: ");
	names_md(&b, sc->metrics, sc->dynamic ? "as listed in with.metrics" : "none");
	printf("%s\n\n", tf_buf_str(&b));
	tf_buf_release(&b);
}

int cmd_kinds(int argc, char **argv, struct tf_cli *cli)
{
	enum { OPT_MD = 0x2000 };
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS, {"markdown", no_argument, NULL, OPT_MD}, {NULL, 0, NULL, 0}};
	int c, md = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			kinds_usage(stdout);
			return TF_EXIT_OK;
		}
		if (c != OPT_MD)
			return tf_cli_usage_error(argv[0], "unknown option");
		md = 1;
	}
	if (md && cli->json)
		return tf_cli_usage_error(argv[0], "choose one of --json and --markdown");
	const char *const *all = tf_step_kind_names();
	for (int i = optind; i < argc; i++)
		if (!tf_step_schema_find(argv[i]))
			return tf_cli_usage_error(argv[0], "no step kind '%s'", argv[i]);
	json_t *doc = json_array();
	struct tf_buf b = {0};
	for (size_t i = 0; all[i]; i++) {
		int wanted = optind == argc;
		for (int j = optind; j < argc; j++)
			wanted |= !strcmp(argv[j], all[i]);
		const struct tf_step_schema *sc = tf_step_schema_find(all[i]);
		if (!wanted)
			continue;
		if (cli->json)
			json_array_append_new(doc, kind_json(sc));
		else if (md)
			kind_markdown(sc, &b);
		else
			kind_text(sc);
	}
	int rc = TF_EXIT_OK;
	if (cli->json)
		rc = tf_cli_print_json(stdout, doc);
	else if (md)
		fputs(tf_buf_str(&b), stdout);
	json_decref(doc);
	tf_buf_release(&b);
	return rc;
}
