/* cmd_tokens.c — `tpuflow tokens create|list|revoke`: the bearer tokens of the REST API,
 * managed on the state home directly (no daemon needed). A new token is printed once; only
 * its SHA-256 is stored. */
#include "cli/cli.h"
#include "common/common.h"
#include "web/tokens.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: tpuflow tokens create --name NAME --scope read|trigger|admin|predict "
	           "[--expires 90d]\n"
	           "       tpuflow tokens list\n"
	           "       tpuflow tokens revoke ID|NAME|PREFIX\n"
	           "  (common: --home DIR, --json) scopes: read < trigger < admin; predict is for "
	           "model serving only\n");
}

static int create(struct tf_store *st, struct tf_cli *cli, const char *name, const char *scope_s,
                  const char *expires)
{
	enum tf_scope scope;
	double ttl = 0;
	if (!name || !*name)
		return tf_cli_usage_error("tokens", "create needs --name NAME");
	if (tf_scope_parse(scope_s, &scope))
		return tf_cli_usage_error("tokens", "--scope wants read, trigger, admin or predict");
	if (expires && tf_token_parse_ttl(expires, &ttl))
		return tf_cli_usage_error("tokens", "--expires wants a lifetime such as 90d, 12h, 30m, "
		                                    "not '%s'",
		                          expires);
	char tok[TF_TOKEN_LEN + 1];
	int64_t id = 0;
	int rc = tf_token_create(st, name, scope, ttl, tok, &id);
	if (rc) {
		fprintf(stderr, "tpuflow tokens: cannot create the token: %s\n", tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	if (cli->json) {
		json_t *doc = json_pack("{s:I, s:s, s:s, s:s}", "id", (json_int_t)id, "name", name,
		                        "scope", tf_scope_name(scope), "token", tok);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		printf("%s\n", tok);
		fprintf(stderr,
		        "token %lld '%s' (scope %s%s%s): shown only now; store it as a secret "
		        "(e.g. TPUFLOW_TOKEN)\n",
		        (long long)id, name, tf_scope_name(scope), expires ? ", expires in " : "",
		        expires ? expires : "");
	}
	return TF_EXIT_OK;
}

static int list(struct tf_store *st, struct tf_cli *cli)
{
	json_t *arr = NULL;
	if (tf_token_list(st, &arr)) {
		fprintf(stderr, "tpuflow tokens: %s\n", tf_store_errmsg(st));
		return TF_EXIT_SOFTWARE;
	}
	if (cli->json) {
		tf_cli_print_json(stdout, arr);
	} else {
		printf("%-4s %-16s %-14s %-8s %-19s %-19s %-19s %s\n", "ID", "NAME", "PREFIX", "SCOPE",
		       "CREATED", "EXPIRES", "LAST USED", "REVOKED");
		size_t i;
		json_t *t;
		json_array_foreach(arr, i, t)
		{
			char c[32], e[32], u[32], r[32];
			tf_cli_fmt_time(json_object_get(t, "created_at"), c, sizeof(c));
			tf_cli_fmt_time(json_object_get(t, "expires_at"), e, sizeof(e));
			tf_cli_fmt_time(json_object_get(t, "last_used_at"), u, sizeof(u));
			tf_cli_fmt_time(json_object_get(t, "revoked_at"), r, sizeof(r));
			printf("%-4lld %-16s %-14s %-8s %-19s %-19s %-19s %s\n",
			       (long long)json_integer_value(json_object_get(t, "id")),
			       json_string_value(json_object_get(t, "name")),
			       json_string_value(json_object_get(t, "prefix")),
			       json_string_value(json_object_get(t, "scope")), c, e, u, r);
		}
	}
	json_decref(arr);
	return TF_EXIT_OK;
}

int cmd_tokens(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"name", required_argument, NULL, 'n'},
	    {"scope", required_argument, NULL, 's'},
	    {"expires", required_argument, NULL, 'e'},
	    {NULL, 0, NULL, 0},
	};
	const char *name = NULL, *scope = "read", *expires = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'n': name = optarg; break;
		case 's': scope = optarg; break;
		case 'e': expires = optarg; break;
		case 'h': usage(stdout); return TF_EXIT_OK;
		default: usage(stderr); return TF_EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return tf_cli_usage_error("tokens", "expected create, list or revoke");
	const char *sub = argv[optind];
	if (strcmp(sub, "create") && strcmp(sub, "list") && strcmp(sub, "revoke"))
		return tf_cli_usage_error("tokens", "unknown subcommand '%s'", sub);
	if (!strcmp(sub, "revoke") && optind + 2 != argc)
		return tf_cli_usage_error("tokens", "revoke wants one token id, name or prefix");
	struct tf_store *st = cli->db;
	int ret;
	if (!strcmp(sub, "create")) {
		ret = create(st, cli, name, scope, expires);
	} else if (!strcmp(sub, "list")) {
		ret = list(st, cli);
	} else {
		ret = tf_cli_named_outcome(cli, "tokens", st,
		                           tf_token_revoke(st, argv[optind + 1], tf_now_wall()),
		                           "token", argv[optind + 1], "revoked", "revoked");
	}
	return ret;
}
