/* cmd_db.c — `tpuflow db status|migrate`: the state database's schema version and its
 * pending migrations. main gives the database as it is (NEED_DB_AS_IS: read-only, any
 * version, NULL when there is none), which status reports on; migrate opens it as every
 * other command does (tf_cli_open_store: created, migrated) and counts what that applied. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: tpuflow db status|migrate [--home DIR] [--json]\n\n"
	           "  status    the database file, its schema version and pending migrations\n"
	           "  migrate   apply pending migrations (each in its own transaction)\n\n"
	           "The database is HOME/" TF_STORE_FILE ". Exit 78 when it is newer than this "
	           "program.\n");
}

int cmd_db(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS, {0, 0, 0, 0}};
	int c, ret = TF_EXIT_OK, version = 0, applied = 0;
	struct tf_store *st = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return TF_EXIT_OK;
		}
		if (!tf_cli_common_option(cli, c, optarg))
			return tf_cli_usage_error("db", "unknown option");
	}
	if (optind + 1 != argc)
		return tf_cli_usage_error("db", "expected one of: status, migrate");
	const char *sub = argv[optind];
	int migrate = !strcmp(sub, "migrate");
	if (!migrate && strcmp(sub, "status"))
		return tf_cli_usage_error("db", "unknown subcommand '%s' (status, migrate)", sub);

	int before = 0;
	if (cli->db && tf_store_version(cli->db, &before)) {
		fprintf(stderr, "tpuflow db: %s\n", tf_store_errmsg(cli->db));
		return TF_EXIT_SOFTWARE;
	}
	version = before;
	if (migrate) {
		/* migrations are numbered without gaps, so what opening applied is the difference */
		if (!(st = tf_cli_open_store(cli, "db", &ret)))
			return ret;
		if (tf_store_version(st, &version)) {
			fprintf(stderr, "tpuflow db: %s\n", tf_store_errmsg(st));
			ret = TF_EXIT_SOFTWARE;
			goto out;
		}
		applied = version - before;
	}
	char *path = tf_xasprintf("%s/%s", cli->home, TF_STORE_FILE);
	int latest = tf_store_latest_version();
	if (cli->json) {
		json_t *pending = json_array();
		for (int v = version + 1; v <= latest; v++)
			json_array_append_new(pending, json_string(tf_store_migration_name(v)));
		json_t *doc = json_pack("{s:s, s:i, s:i, s:o, s:b}", "database", path, "version",
		                        version, "latest", latest, "pending", pending, "newer",
		                        version > latest);
		if (migrate)
			json_object_set_new(doc, "applied", json_integer(applied));
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		if (migrate)
			printf("applied %d migration(s)\n", applied);
		printf("database: %s\nschema version: %d (this program knows up to %d)\n", path,
		       version, latest);
		for (int v = version + 1; v <= latest; v++)
			printf("pending: %s\n", tf_store_migration_name(v));
		if (version == latest)
			printf("up to date\n");
		else if (version > latest)
			printf("newer than this program: use a newer tpuflow (this one refuses to "
			       "write it)\n");
	}
	if (version > latest)
		ret = TF_EXIT_CONFIG;
	free(path);
out:
	tf_store_close(st);
	return ret;
}
