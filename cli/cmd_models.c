/* cmd_models.c — `tpuflow models list|show|alias|compare`: the model registry for people
 * and scripts. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/registry.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: tpuflow models list\n"
	           "       tpuflow models show NAME [VERSION]\n"
	           "       tpuflow models alias NAME ALIAS VERSION   point ALIAS at VERSION\n"
	           "       tpuflow models compare NAME V1 V2         metrics side by side\n"
	           "       tpuflow models promote NAME [ALIAS]       the alias's canary takes all "
	           "its traffic\n"
	           "       tpuflow models rollback NAME [ALIAS]      retire the canary, or without "
	           "one,\n"
	           "                                                 the alias back to its previous "
	           "version\n"
	           "                                                 (ALIAS: production by default)\n"
	           "  (common: --home DIR, --json; VERSION is a number, 'latest' or an alias)\n");
}

/* The version REF names; an exit code (TF_EXIT_NOTFOUND with a message when there is none). */
static int resolve(struct tf_store *st, const char *model, const char *ref, int64_t *v)
{
	int rc = tf_registry_resolve(st, model, ref, v);
	if (rc == -ENOENT)
		fprintf(stderr,
		        "tpuflow models: model '%s' has no version or alias '%s' (see "
		        "'tpuflow models show %s')\n",
		        model, ref, model);
	else if (rc)
		fprintf(stderr, "tpuflow models: %s\n", tf_store_errmsg(st));
	return rc == -ENOENT ? TF_EXIT_NOTFOUND : rc ? TF_EXIT_SOFTWARE : TF_EXIT_OK;
}

static void print_metrics_line(json_t *metrics)
{
	const char *k;
	json_t *v;
	json_object_foreach(metrics, k, v)
	{
		if (json_is_number(v))
			printf(" %s=%.4g", k, json_number_value(v));
	}
}

void tf_cli_models_show(const char *model, json_t *doc, int version)
{
	if (version) {
		printf("%s version %lld\n", model,
		       (long long)json_integer_value(json_object_get(doc, "version")));
		const char *keys[] = {"run_id", "step", "bundle", "checkpoint", "dataset"};
		for (size_t i = 0; i < TF_ARRAY_LEN(keys); i++)
			if (json_string_value(json_object_get(doc, keys[i])))
				printf("  %-10s %s\n", keys[i],
				       json_string_value(json_object_get(doc, keys[i])));
		printf("  metrics   ");
		print_metrics_line(json_object_get(doc, "metrics"));
		char *t = json_dumps(json_object_get(doc, "tags"), JSON_COMPACT);
		char *p = json_dumps(json_object_get(doc, "params"), JSON_COMPACT);
		char *a = json_dumps(json_object_get(doc, "aliases"), JSON_COMPACT);
		printf("\n  tags       %s\n  params     %s\n  aliases    %s\n", t, p, a);
		free(t);
		free(p);
		free(a);
	} else {
		printf("model %s\n", model);
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(doc, "versions"), i, v)
		{
			printf("  v%-4lld run %-24s",
			       (long long)json_integer_value(json_object_get(v, "version")),
			       json_string_value(json_object_get(v, "run_id")));
			print_metrics_line(json_object_get(v, "metrics"));
			json_t *al = json_object_get(v, "aliases");
			if (json_array_size(al)) {
				printf("  [");
				size_t j;
				json_t *a;
				json_array_foreach(al, j, a)
				    printf("%s%s", j ? ", " : "", json_string_value(a));
				printf("]");
			}
			printf("\n");
		}
		json_array_foreach(json_object_get(doc, "deployments"), i, v)
		{
			if (!json_is_true(json_object_get(v, "active")))
				continue;
			printf("  deployed: '%s' -> v%lld",
			       json_string_value(json_object_get(v, "alias")),
			       (long long)json_integer_value(json_object_get(v, "version")));
			if (json_is_integer(json_object_get(v, "canary_version")))
				printf(", canary v%lld at %.3g%%",
				       (long long)json_integer_value(
				           json_object_get(v, "canary_version")),
				       json_number_value(json_object_get(v, "canary_percent")));
			if (json_is_object(json_object_get(v, "rollout"))) {
				char *pol = json_dumps(json_object_get(v, "rollout"), JSON_COMPACT);
				printf(", rollout %s", pol ? pol : "");
				free(pol);
			}
			printf("\n");
		}
		/* the moves with a reason (rollout steps, rollbacks, by hand), newest first */
		json_array_foreach(json_object_get(doc, "deployments"), i, v)
		{
			const char *why = json_string_value(json_object_get(v, "reason"));
			if (!why)
				continue;
			char when[64];
			tf_cli_fmt_time(json_object_get(v, "created_at"), when, sizeof(when));
			printf("  %s  %s\n", when, why);
		}
	}
}

static int show(struct tf_store *st, struct tf_cli *cli, const char *model, const char *ref)
{
	json_t *doc = NULL;
	int rc;
	if (ref) {
		int64_t v;
		if ((rc = resolve(st, model, ref, &v)))
			return rc;
		rc = tf_registry_version(st, model, v, &doc);
	} else {
		rc = tf_registry_show(st, model, &doc);
	}
	if (rc == -ENOENT) {
		fprintf(stderr, "tpuflow models: no model '%s' (see 'tpuflow models list')\n",
		        model);
		return TF_EXIT_NOTFOUND;
	}
	if (rc) {
		fprintf(stderr, "tpuflow models: %s\n", tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	if (cli->json)
		tf_cli_print_json(stdout, doc);
	else
		tf_cli_models_show(model, doc, ref != NULL);
	json_decref(doc);
	return TF_EXIT_OK;
}

void tf_cli_models_compare(const char *model, const char *r1, const char *r2, json_t *a,
                           json_t *b, int json)
{
	json_t *ma = json_object_get(a, "metrics"), *mb = json_object_get(b, "metrics");
	json_t *rows = json_array();
	json_t *names = json_object();
	const char *k;
	json_t *v;
	json_object_foreach(ma, k, v) json_object_set_new(names, k, json_true());
	json_object_foreach(mb, k, v) json_object_set_new(names, k, json_true());
	json_object_foreach(names, k, v)
	{
		json_t *x = json_object_get(ma, k), *y = json_object_get(mb, k);
		json_t *row = json_pack("{s:s, s:O, s:O}", "metric", k, "a", x ? x : json_null(),
		                        "b", y ? y : json_null());
		if (json_is_number(x) && json_is_number(y))
			json_object_set_new(row, "delta",
			                    json_real(json_number_value(y) - json_number_value(x)));
		json_array_append_new(rows, row);
	}
	if (json) {
		json_t *doc = json_pack("{s:s, s:O, s:O, s:O}", "model", model, "a",
		                        json_object_get(a, "version"), "b",
		                        json_object_get(b, "version"), "metrics", rows);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		printf("%-20s %14s %14s %12s\n", "metric", r1, r2, "delta");
		size_t i;
		json_t *row;
		json_array_foreach(rows, i, row)
		{
			json_t *x = json_object_get(row, "a"), *y = json_object_get(row, "b");
			char sa[32] = "-", sb[32] = "-", sd[32] = "";
			if (json_is_number(x))
				snprintf(sa, sizeof(sa), "%.6g", json_number_value(x));
			if (json_is_number(y))
				snprintf(sb, sizeof(sb), "%.6g", json_number_value(y));
			if (json_object_get(row, "delta"))
				snprintf(sd, sizeof(sd), "%+.4g",
				         json_number_value(json_object_get(row, "delta")));
			printf("%-20s %14s %14s %12s\n",
			       json_string_value(json_object_get(row, "metric")), sa, sb, sd);
		}
	}
	json_decref(rows);
	json_decref(names);
}

static int compare(struct tf_store *st, struct tf_cli *cli, const char *model, const char *r1,
                   const char *r2)
{
	int64_t v1, v2;
	json_t *a = NULL, *b = NULL;
	int rc = resolve(st, model, r1, &v1);
	if (rc || (rc = resolve(st, model, r2, &v2)))
		return rc;
	if (tf_registry_version(st, model, v1, &a) || tf_registry_version(st, model, v2, &b)) {
		fprintf(stderr, "tpuflow models: %s\n", tf_store_errmsg(st));
		json_decref(a);
		return TF_EXIT_SOFTWARE;
	}
	tf_cli_models_compare(model, r1, r2, a, b, cli->json);
	json_decref(a);
	json_decref(b);
	return TF_EXIT_OK;
}

/* promote: the deployment of `alias` has its canary take all the traffic; rollback: the
 * canary is retired, or without one, the alias goes back to the version it had before. Each
 * is a new deployment record (docs/serving.md). */
static int promote_rollback(struct tf_store *st, struct tf_cli *cli, const char *model,
                            const char *alias, int promote)
{
	const char *verb = promote ? "promote" : "rollback";
	json_t *dep = NULL, *out = NULL;
	if (tf_registry_deployment(st, model, alias, &dep)) {
		fprintf(stderr, "tpuflow models %s: model '%s' has no deployment of '%s'\n", verb,
		        model, alias);
		return TF_EXIT_FAILED;
	}
	json_t *cv = json_object_get(dep, "canary_version");
	json_t *prev = json_object_get(dep, "previous_version");
	int has_canary = json_is_integer(cv), has_prev = json_is_integer(prev);
	int64_t cur = json_integer_value(json_object_get(dep, "version")), to;
	int64_t canary = json_integer_value(cv), before = json_integer_value(prev);
	json_decref(dep);
	if (promote && !has_canary) {
		fprintf(stderr, "tpuflow models promote: model '%s' has no canary to promote\n", model);
		return TF_EXIT_FAILED;
	}
	if (!promote && !has_canary && !has_prev) {
		fprintf(stderr, "tpuflow models rollback: model '%s' has no canary and no previous "
		                "version to go back to\n",
		        model);
		return TF_EXIT_FAILED;
	}
	to = promote ? canary : has_canary ? cur : before;
	struct tf_deploy_spec d = {.model = model,
	                           .alias = alias,
	                           .version = to,
	                           .event = promote ? "model_promoted" : "model_rolled_back",
	                           .reason = promote      ? "promoted by hand"
	                                     : has_canary ? "canary retired by hand"
	                                                  : "rolled back by hand"};
	if (tf_registry_deploy(st, &d, &out)) {
		fprintf(stderr, "tpuflow models %s: %s\n", verb, tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	if (cli->json)
		tf_cli_print_json(stdout, out);
	else
		printf("%s '%s' -> version %lld (%s)\n", model, alias, (long long)to,
		       promote ? "canary promoted" : has_canary ? "canary retired" : "rolled back");
	json_decref(out);
	return TF_EXIT_OK;
}

int cmd_models(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS, {0, 0, 0, 0}};
	int c, ret = TF_EXIT_OK, rc;
	struct tf_store *st = cli->db;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return TF_EXIT_OK;
		}
		if (!tf_cli_common_option(cli, c, optarg))
			return tf_cli_usage_error("models", "unknown option");
	}
	int n = argc - optind;
	char **a = argv + optind;
	if (n < 1)
		return tf_cli_usage_error("models",
		                          "expected list, show, alias, compare, promote or rollback");
	if ((!strcmp(a[0], "show") && (n < 2 || n > 3)) || (!strcmp(a[0], "alias") && n != 4) ||
	    (!strcmp(a[0], "compare") && n != 4) || (!strcmp(a[0], "list") && n != 1) ||
	    ((!strcmp(a[0], "promote") || !strcmp(a[0], "rollback")) && (n < 2 || n > 3)))
		return tf_cli_usage_error("models", "wrong arguments for '%s'", a[0]);
	if (!strcmp(a[0], "list")) {
		json_t *arr = NULL;
		if (tf_registry_list(st, &arr)) {
			fprintf(stderr, "tpuflow models: %s\n", tf_store_errmsg(st));
			return TF_EXIT_SOFTWARE;
		}
		if (cli->json) {
			tf_cli_print_json(stdout, arr);
		} else {
			printf("%-24s %8s %7s  %s\n", "MODEL", "VERSIONS", "LATEST", "ALIASES");
			size_t i;
			json_t *m;
			json_array_foreach(arr, i, m)
			{
				char *al = json_dumps(json_object_get(m, "aliases"), JSON_COMPACT);
				printf(
				    "%-24s %8lld %7lld  %s\n",
				    json_string_value(json_object_get(m, "name")),
				    (long long)json_integer_value(json_object_get(m, "versions")),
				    (long long)json_integer_value(json_object_get(m, "latest")),
				    al);
				free(al);
			}
		}
		json_decref(arr);
	} else if (!strcmp(a[0], "show")) {
		ret = show(st, cli, a[1], n == 3 ? a[2] : NULL);
	} else if (!strcmp(a[0], "alias")) {
		int64_t v;
		char why[300];
		if (tf_registry_check_name(a[2], TF_REGNAME_ALIAS, why, sizeof(why))) {
			fprintf(stderr, "tpuflow models: %s (docs/registry.md, Names)\n", why);
			return TF_EXIT_DATAERR;
		}
		if ((ret = resolve(st, a[1], a[3], &v)))
			return ret;
		rc = tf_registry_set_alias(st, a[1], a[2], v);
		if (rc) {
			fprintf(stderr, "tpuflow models: %s\n", tf_store_errmsg(st));
			return TF_EXIT_SOFTWARE;
		}
		if (cli->json) {
			json_t *doc = json_pack("{s:s, s:s, s:I}", "model", a[1], "alias", a[2],
			                        "version", (json_int_t)v);
			tf_cli_print_json(stdout, doc);
			json_decref(doc);
		} else {
			printf("%s '%s' -> version %lld\n", a[1], a[2], (long long)v);
		}
	} else if (!strcmp(a[0], "compare")) {
		ret = compare(st, cli, a[1], a[2], a[3]);
	} else if (!strcmp(a[0], "promote") || !strcmp(a[0], "rollback")) {
		ret = promote_rollback(st, cli, a[1], n == 3 ? a[2] : "production",
		                       !strcmp(a[0], "promote"));
	} else {
		ret = tf_cli_usage_error("models", "unknown subcommand '%s'", a[0]);
	}
	return ret;
}
